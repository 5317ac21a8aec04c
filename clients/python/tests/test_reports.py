"""The change reports as the daemon sends them, read into the client's
types (no mount needed: the answers were recorded from a real one)."""

from __future__ import annotations

import json

import zonemount

# A staged zone with every kind of change (and a name that is not UTF-8),
# and a plain rw zone; the zone of a commit with conflicts on a path and
# inside a deleted dir; a zone a commit or discard left alone.
CHANGES = json.loads('{"zones": [{"changes": [{"diff": "--- a/clash\\n+++ b/clash\\n@@ -1 +1 @@\\n-host changed\\n+staged\\n", "file_type": "file", "kind": "modified", "mode": 420, "old_mode": 420, "old_size": 13, "path": "clash", "size": 7, "what": ["content", "times"]}, {"diff": "", "entries": 4, "file_type": "dir", "kind": "deleted", "old_mode": 493, "path": "d"}, {"diff": "mode 0755 -> 0700 emptydir\\n", "file_type": "dir", "kind": "modified", "mode": 448, "old_mode": 493, "path": "emptydir", "what": ["mode"]}, {"diff": "--- a/f\\n+++ b/f\\n@@ -1 +1,2 @@\\n-old\\n+over\\n+more\\n", "file_type": "file", "kind": "modified", "mode": 420, "old_mode": 420, "old_size": 4, "path": "f", "size": 10, "what": ["content", "times"]}, {"diff": "--- a/gone\\n+++ /dev/null\\n@@ -1 +0,0 @@\\n-bye\\n", "file_type": "file", "kind": "deleted", "old_mode": 420, "old_size": 4, "path": "gone"}, {"diff": "mode 0644 -> 0600 modeonly\\n", "file_type": "file", "kind": "modified", "mode": 384, "old_mode": 420, "old_size": 5, "path": "modeonly", "size": 5, "what": ["mode"]}, {"diff": "--- /dev/null\\n+++ b/na\\\\xffme\\n@@ -0,0 +1 @@\\n+odd\\n", "file_type": "file", "kind": "added", "mode": 420, "path": "na�me", "path_b64": "bmH/bWU=", "size": 4}, {"diff": "", "file_type": "dir", "kind": "added", "mode": 493, "path": "nd"}, {"diff": "", "file_type": "dir", "kind": "added", "mode": 493, "path": "nd/inner"}, {"diff": "--- /dev/null\\n+++ b/nd/inner/n\\n@@ -0,0 +1 @@\\n+n\\n", "file_type": "file", "kind": "added", "mode": 420, "path": "nd/inner/n", "size": 2}, {"diff": "--- /dev/null\\n+++ b/new\\n@@ -0,0 +1 @@\\n+new\\n", "file_type": "file", "kind": "added", "mode": 420, "path": "new", "size": 4}, {"diff": "symlink oldlink: f -> new\\n", "file_type": "symlink", "kind": "modified", "mode": 511, "old_mode": 511, "old_size": 1, "path": "oldlink", "size": 3, "what": ["target"]}, {"diff": "", "file_type": "file", "from": "torename", "kind": "renamed", "mode": 420, "old_mode": 420, "old_size": 4, "path": "renamed", "size": 4}, {"diff": "symlink sym: (none) -> f\\n", "file_type": "symlink", "kind": "added", "mode": 511, "path": "sym", "size": 1}], "staged": true, "zone": "work"}, {"changes": [{"kind": "added", "path": "pnew"}, {"kind": "deleted", "path": "pold"}], "staged": false, "zone": "plain"}]}')
COMMIT = json.loads('{"zones": [{"applied": [{"file_type": "file", "kind": "added", "mode": 420, "path": "busy", "size": 0}, {"file_type": "dir", "kind": "modified", "mode": 448, "old_mode": 493, "path": "emptydir", "what": ["mode"]}, {"file_type": "file", "kind": "modified", "mode": 420, "old_mode": 420, "old_size": 4, "path": "f", "size": 10, "what": ["content", "times"]}, {"file_type": "file", "kind": "deleted", "old_mode": 420, "old_size": 4, "path": "gone"}, {"file_type": "file", "kind": "modified", "mode": 384, "old_mode": 420, "old_size": 5, "path": "modeonly", "size": 5, "what": ["mode"]}, {"file_type": "file", "kind": "added", "mode": 420, "path": "na�me", "path_b64": "bmH/bWU=", "size": 4}, {"file_type": "symlink", "kind": "modified", "mode": 511, "old_mode": 511, "old_size": 1, "path": "oldlink", "size": 3, "what": ["target"]}, {"file_type": "symlink", "kind": "added", "mode": 511, "path": "sym", "size": 1}, {"file_type": "file", "kind": "deleted", "old_mode": 420, "old_size": 4, "path": "torename"}], "conflicts": [{"path": "clash", "why": "the host changed it after the worker did"}, {"at": "d/sub", "path": "d", "why": "inside it: the host changed it after the worker did"}], "zone": "work"}]}')
LEFT_ALONE = json.loads('{"zones": [{"applied": [], "conflicts": [{"path": "", "why": "a worker has 1 file(s) of /work open for writing; try again once they are closed"}], "discarded": [], "zone": "work"}]}')


def test_a_change_report_reads_into_its_types() -> None:
    work, plain = [zonemount.ZoneChanges.from_json(z) for z in CHANGES["zones"]]
    assert (work.zone, work.staged, work.incomplete) == ("work", True, False)
    by = {c.path_bytes: c for c in work.changes}
    assert by[b"na\xffme"].path == "na\ufffdme"
    assert by[b"na\xffme"].kind == "added"
    d = by[b"d"]
    assert (d.kind, d.file_type, d.entries, d.diff) == ("deleted", "dir", 4, "")
    assert by[b"f"].what == ("content", "times")
    assert by[b"f"].diff is not None and "+over" in by[b"f"].diff
    r = by[b"renamed"]
    assert (r.kind, r.from_path, r.from_bytes) == ("renamed", "torename", b"torename")
    assert (plain.zone, plain.staged) == ("plain", False)
    assert [(c.path, c.kind, c.file_type) for c in plain.changes] == [
        ("pnew", "added", None),
        ("pold", "deleted", None),
    ]
    assert zonemount.ZoneChanges.from_json(
        {"zone": "out", "staged": False, "changes": [], "incomplete": True}
    ).incomplete


def test_commit_and_discard_answers_read_into_their_types() -> None:
    z = zonemount.ZoneCommit.from_json(COMMIT["zones"][0])
    assert [c.path for c in z.conflicts] == ["clash", "d"]
    inside = z.conflicts[1]
    assert (inside.at, inside.at_bytes) == ("d/sub", b"d/sub")
    assert z.conflicts[0].at is None and z.conflicts[0].at_bytes is None
    assert b"na\xffme" in [c.path_bytes for c in z.applied]
    for read in (zonemount.ZoneCommit.from_json, zonemount.ZoneCommit.from_discard_json):
        busy = read(LEFT_ALONE["zones"][0])
        assert busy.applied == []
        assert [c.path for c in busy.conflicts] == [""]
        assert "open for writing" in busy.conflicts[0].why


def test_a_change_names_who_made_its_first_and_last_change() -> None:
    # As the daemon sends it (src/control/wire_table.rs): an argv that is
    # not UTF-8, and a process gone before it could be read.
    d = json.loads(
        '{"first": {"pid": 7, "time": "2025-01-01T00:00:00.000Z", "uid": 0},'
        ' "kind": "modified", "path": "app.py",'
        ' "last": {"argv": "sed -i s/hi/hello/ app.py \ufffd\\u001b",'
        ' "argv_b64": "c2VkIC1pIHMvaGkvaGVsbG8vIGFwcC5weSD/Gw==", "comm": "sed",'
        ' "pid": 4242, "time": "2025-01-01T00:00:00.250Z", "uid": 1000}}'
    )
    c = zonemount.Change.from_json(d)
    assert c.last is not None and c.first is not None
    assert (c.last.pid, c.last.uid, c.last.comm) == (4242, 1000, "sed")
    assert c.last.argv_bytes == b"sed -i s/hi/hello/ app.py \xff\x1b"
    assert c.last.comm_bytes == b"sed"
    assert c.last.time == "2025-01-01T00:00:00.250Z" and c.last.known
    assert (c.first.pid, c.first.comm, c.first.argv) == (7, None, None)
    assert not c.first.known
    # Shown to a person, escaped like a name.
    assert zonemount.escape(c.last.argv_bytes) == "sed -i s/hi/hello/ app.py \\xff\\x1b"
    # A change without them (an older daemon) reads as before.
    plain = zonemount.Change.from_json({"kind": "added", "path": "a"})
    assert plain.first is None and plain.last is None
