"""The README's configuration reference must list every setting, and nothing that is gone."""

import re
from pathlib import Path

from workers.config import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`MODSTREAM_([A-Z_]+)`", README)) - {"CACHE_DIR"}
    assert documented == {name.upper() for name in Settings.model_fields}
