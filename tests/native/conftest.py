import pytest

# markers of transformers' own test configuration (its pyproject.toml) that the common tests use
MARKERS = ("slow", "accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test",
           "torch_compile_test")


def pytest_configure(config: pytest.Config):
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
