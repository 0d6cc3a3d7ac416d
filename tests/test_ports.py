"""sparkops.ports.free_port: a port that binds now, outside the range outgoing connections take theirs from."""

import socket

import pytest

from sparkops import ports


def test_a_free_port_is_below_the_ephemeral_range_and_binds():
    low, high = ports.ephemeral_range()
    assert 1024 <= low <= high
    for _ in range(20):
        port = ports.free_port()
        assert ports.BELOW_FROM <= port < low, (port, low)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free as promised


def test_a_port_in_use_is_never_picked(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        first = [taken, taken]  # the taken port picked twice, then the real random picks
        randrange = ports.random.SystemRandom.randrange
        monkeypatch.setattr(
            ports.random.SystemRandom, "randrange", lambda self, a, b: first.pop() if first else randrange(self, a, b)
        )
        assert ports.free_port() != taken
        assert not first  # both picks of it were tried and refused


def test_no_room_below_the_range_falls_back_to_the_kernels_choice(tmp_path, monkeypatch):
    proc = tmp_path / "ip_local_port_range"
    proc.write_text("1024\t60999\n")
    assert ports.ephemeral_range(str(proc)) == (1024, 60999)
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 60999))
    port = ports.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_an_unreadable_range_is_linuxs_default(tmp_path):
    assert ports.ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)
    (tmp_path / "garbage").write_text("x y")
    assert ports.ephemeral_range(str(tmp_path / "garbage")) == (32768, 60999)


def test_a_port_range_is_kept_and_no_port_is_handed_out_twice(monkeypatch):
    monkeypatch.setenv(ports.RANGE_ENV, "23000-23040")
    picked = [ports.free_port() for _ in range(30)]
    assert all(23000 <= p < 23040 for p in picked), picked
    assert len(set(picked)) == 30  # none twice, though each was free again when the next was picked


def test_a_bad_port_range_says_what_is_wrong(monkeypatch):
    for bad, said in (("20000", "expected LOW-HIGH"), ("a-b", "expected LOW-HIGH"), ("30000-20000", "LOW \\+ 16")):
        with pytest.raises(ValueError, match=said):
            ports.port_range(bad)
    assert ports.port_range("") is None
    monkeypatch.setenv(ports.RANGE_ENV, "80-90")
    with pytest.raises(ValueError, match="SPARKOPS_PORT_RANGE='80-90'"):
        ports.free_port()
