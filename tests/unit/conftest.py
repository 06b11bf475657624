from pathlib import Path

import pytest

from tests.conftest import minilm_tokenizer
from workers.text.encoder import TextEncoder


@pytest.fixture(scope="session")
def tokenizer_json() -> Path:
    return minilm_tokenizer()


@pytest.fixture
def encoder(tokenizer_json: Path) -> TextEncoder:
    return TextEncoder(tokenizer_json, 64)
