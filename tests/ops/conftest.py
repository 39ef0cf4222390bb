

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than 20 s on a 2-core CPU (deselect with -m 'not slow')")
