"""planner.safeload and planner.safewrite on their own: the rules docs/inputs.md states."""

from __future__ import annotations

import os
import stat

import pytest

from planner import safeload
from planner.errors import UserError
from planner.safewrite import replacing, target_kind, write_atomic


# ------------------------------------------------------------------ reading
def test_merge_keys_explicit_wins_then_first_merged():
    doc = safeload.parse_yaml("a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc: {<<: [*a, *b], x: 9}\n", "m.yaml")
    assert doc.data["c"] == {"x": 9, "y": 1, "z": 2}


def test_line_numbers_are_kept():
    doc = safeload.parse_yaml("a:\n  b:\n    - 1\n    - {c: 2}\n", "l.yaml")
    assert doc.where(("a", "b", 1, "c")) == "l.yaml:4"
    assert doc.where(("a", "missing")) == "l.yaml:2"  # the deepest known prefix: the value of a


@pytest.mark.parametrize("limits,text,needle", [
    (safeload.with_limits(max_depth=3), "a: {b: {c: {d: 1}}}", "nested more than 3"),
    (safeload.with_limits(max_nodes=10), "[" + ",".join("1" * 20) + "]", "more than 10 YAML nodes"),
    (safeload.with_limits(max_alias_nodes=5), "a: &a [1, 2, 3]\nb: [*a, *a, *a]\n", "aliases expand"),
    (safeload.with_limits(max_bytes=10), "a: 12345678901", "characters"),
])
def test_each_limit_stops_the_parse(limits, text, needle):
    with pytest.raises(UserError) as exc:
        safeload.parse_yaml(text, "t.yaml", limits=limits)
    assert needle in exc.value.render()


def test_within_the_limits_aliases_expand():
    doc = safeload.parse_yaml("a: &a [1, 2, 3]\nb: [*a, *a]\n", "t.yaml", limits=safeload.with_limits(max_alias_nodes=10))
    assert doc.data["b"] == [[1, 2, 3], [1, 2, 3]]


def test_a_large_document_that_pyyaml_wrote_with_anchors_is_read():
    """PyYAML's dumper writes an anchor for every value shared in memory: 1,500 jobs sharing one rollout
    mapping expand ~30,000 values (refused at the old 20,000-value alias budget)."""
    import yaml

    shared = {"batch_prompts": 128, "group_size": 8, "max_response_tokens": 8192, "tp": 1, "nodes": 1,
              "gpu_types": ["H20"], "extra": {"a": 1, "b": [1, 2, 3]}}
    text = yaml.safe_dump({"jobs": [{"name": f"j{i}", "rollout": shared} for i in range(1500)]})
    assert "&id" in text and "*id" in text
    doc = safeload.parse_yaml(text, "big.yaml")
    assert len(doc.data["jobs"]) == 1500 and doc.data["jobs"][-1]["rollout"]["extra"]["b"] == [1, 2, 3]


def test_read_is_bounded_even_when_the_size_lies(tmp_path):
    """A file that grows past the cap after the stat is still cut at the cap (read(max + 1))."""
    p = tmp_path / "big.yaml"
    p.write_bytes(b"#" * 100)
    with pytest.raises(UserError) as exc:
        safeload.read_bytes(p, limits=safeload.with_limits(max_bytes=50))
    assert "at most 50" in exc.value.render()
    assert safeload.read_bytes(p, limits=safeload.with_limits(max_bytes=100)) == b"#" * 100


def test_utf8_bom_is_skipped_and_bad_bytes_name_the_line():
    assert safeload.decode(b"\xef\xbb\xbfa: 1", "f") == "a: 1"
    with pytest.raises(UserError) as exc:
        safeload.decode(b"a: 1\nb: \xff\n", "f.yaml")
    assert "f.yaml:2" in exc.value.render()


def test_json_is_strict_and_depth_bounded():
    assert safeload.parse_json('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    for text, needle in [('{"a": Infinity}', "Infinity"), ('{"a": -Infinity}', "Infinity"), ("[" * 70 + "]" * 70, "nested"),
                         ('{"a": 1,}', "cannot parse as JSON"), ('{"a": 1, "a": 2}', "duplicate key")]:
        with pytest.raises(UserError) as exc:
            safeload.parse_json(text, "j.json")
        assert needle in exc.value.render(), text


@pytest.mark.parametrize("value, refused", [
    ("plain", False), ("caf\u00e9 \u2603", False), ("back\\\\slash\\/quote\\\"", False), ("\\\\n is not a break", False),
    ("esc\\u001b[2J", True), ("ESC\\u001B", True), ("del\\u007f", True), ("c1\\u0085", True), ("raw c1 \u009b", True),
    ("raw del \u007f", True), ("bell\\b", True), ("line\\nbreak", False), ("tab\\there", False),
])
@pytest.mark.parametrize("field", ["name", "message"])
def test_json_files_refuse_control_characters_without_the_walk(tmp_path, value, refused, field):
    """A JSON file is refused by :func:`safeload.load` exactly when the walk of its strings refuses it
    (the text is searched first; only a suspect one is walked, naming the path)."""
    p = tmp_path / "x.json"
    p.write_text('{"jobs": [{"%s": "%s"}]}' % (field, value), encoding="utf-8")
    walked = safeload.Document(safeload.parse_json(p.read_text(encoding="utf-8")), {}, str(p))
    try:
        safeload.check_text(walked)
        by_walk = False
    except UserError:
        by_walk = True
    try:
        safeload.load(p)
        by_load = False
    except UserError as exc:
        by_load = True
        assert "jobs[0]." + field in exc.render()
    line_break = any(e in value.replace("\\\\", "") for e in ("\\n", "\\t"))  # refused in names only
    assert by_load == by_walk == (refused or (field == "name" and line_break))
    if not by_walk:
        assert safeload.json_text_clean(p.read_text(encoding="utf-8")) or "\\" in value


def test_json_text_clean_is_conservative():
    for text in ['{"a": "x\\ny"}', '{"a": "x\\ty"}', '{"a": "\\u0000"}', '{"a": "\\u009F"}', '{"a": "\u0085"}']:
        assert not safeload.json_text_clean(text), text
    for text in ['{"a": "x y"}', '{"a": "\\u00e9\\u0070"}', '{"a": 1}\n', '{"a":\t"b"}']:
        assert safeload.json_text_clean(text), text


def test_check_numbers_names_the_path():
    with pytest.raises(UserError) as exc:
        safeload.check_numbers({"a": [1.0, {"b": float("nan")}]})
    assert "a[1].b" in exc.value.render()
    with pytest.raises(UserError) as exc:
        safeload.check_numbers({"n": True}, bools=False)
    assert "n: true is a boolean" in exc.value.render()
    safeload.check_numbers({"n": True, "x": 1e300})  # booleans allowed, large finite numbers fine


# ------------------------------------------------------------------ writing
def test_regular_targets_are_replaced_atomically_keeping_the_mode(tmp_path):
    p = tmp_path / "out.yaml"
    write_atomic(p, "one\n")
    assert p.read_text() == "one\n"
    os.chmod(p, 0o640)
    write_atomic(p, "two\n")
    assert p.read_text() == "two\n" and stat.S_IMODE(os.stat(p).st_mode) == 0o640
    write_atomic(tmp_path / "state.db", b"x", private=True)
    assert stat.S_IMODE(os.stat(tmp_path / "state.db").st_mode) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.yaml", "state.db"], "no temporary file is left"


def test_a_failed_writer_leaves_the_old_file(tmp_path):
    p = tmp_path / "out.yaml"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with replacing(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer failed")
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["out.yaml"]


def test_devices_are_written_in_place_never_replaced():
    before = os.stat("/dev/null")
    assert target_kind("/dev/null") == "stream"
    write_atomic("/dev/null", "discarded\n")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_fifo_is_streamed_when_read_and_refused_without_a_reader(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UserError) as exc:  # nobody reads: refused at once, not a hang
        write_atomic(fifo, "x")
    assert "cannot write" in exc.value.render()
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        write_atomic(fifo, "hello")
        assert os.read(fd, 100) == b"hello"
    finally:
        os.close(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_links_and_directories_are_refused(tmp_path):
    (tmp_path / "real.yaml").write_text("keep")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    for target, needle in [(tmp_path / "link.yaml", "symbolic link"), (tmp_path, "directory"),
                           (tmp_path / "nope" / "x.yaml", "does not exist")]:
        with pytest.raises(UserError) as exc:
            write_atomic(target, "new")
        assert needle in exc.value.render()
    assert (tmp_path / "real.yaml").read_text() == "keep" and (tmp_path / "link.yaml").is_symlink()


def test_a_new_journal_is_private(tmp_path):
    from executor.journal import Journal

    j = Journal(tmp_path / "sub" / "journal.db")
    try:
        assert j.history(1) == []
    finally:
        j.close()
    assert stat.S_IMODE(os.stat(tmp_path / "sub" / "journal.db").st_mode) == 0o600


def test_yaml_numbers_read_as_a_reader_means_them():
    """An outside audit (session 45): ``count: 010`` was read as 8 (YAML 1.1 octal) and ``slo_s: 1e3`` as the
    text '1e3' (YAML 1.1 floats need a dot and an exponent sign), then refused as "not a valid number"."""
    from planner.errors import UserError
    from planner.safeload import parse_yaml

    for text, want in (("a: 1e3", 1000.0), ("a: 1.5e-3", 0.0015), ("a: 2E+6", 2e6), ("a: 0", 0), ("a: '010'", "010"),
                       ("a: 1_000", 1000), ("a: e3", "e3")):
        got = parse_yaml(text).data["a"]
        assert got == want and type(got) is type(want), (text, got)
    for text in ("a: 010", "a: -07", "b: [1, 010]"):
        with pytest.raises(UserError, match="leading zero"):
            parse_yaml(text)
