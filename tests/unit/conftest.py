from pathlib import Path

import pytest

from tests.conftest import minilm_tokenizer


@pytest.fixture(scope="session")
def tokenizer_json() -> Path:
    return minilm_tokenizer()
