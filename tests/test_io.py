import pytest

from simserve.io import atomic_path, write_text_atomic


def test_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out.csv"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_directory_replaced_whole(tmp_path):
    target = tmp_path / "prof"
    for content in ("old", "new"):
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "a.txt").write_text(content)
    assert (target / "a.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["prof"]


def test_write_text_atomic(tmp_path):
    write_text_atomic(tmp_path / "x" / "y.txt", "hello")
    assert (tmp_path / "x" / "y.txt").read_text() == "hello"
