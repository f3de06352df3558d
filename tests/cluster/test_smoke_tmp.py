import pytest
pytestmark = pytest.mark.cluster

def test_standalone_up(standalone):
    st = standalone.state()
    assert st["status"] == "ALIVE" and len(st["workers"]) == 1, st

def test_connect_up(remote):
    assert remote.range(5).count() == 5
