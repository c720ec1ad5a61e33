"""A rank imported in time windows (paraver_windows): the windows stay about `window_lines` lines whatever the
rank's length, and a rank the windows cannot take is imported whole; both equal to the in-memory import
(`same_as_in_memory`; the stream tests run every trace through windows of a few lines too)."""
import pytest
import test_paraver_import as hand
from test_paraver_stream import same_as_in_memory

from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_windows import NotInTimeOrder


class _Seen:
    """What the windows of an import saw: the event lines of each `Events` built, and the ranks imported in
    windows or whole."""

    def __init__(self, monkeypatch):
        import gpt2trace.interop.paraver_events as events
        import gpt2trace.interop.paraver_stream as stream
        self.lines, self.windowed, self.whole = [], 0, 0
        init, windowed = events.Events.__init__, stream.import_rank

        def spy_init(ev, path, header, body, *args, **kwargs):
            init(ev, path, header, body, *args, **kwargs)
            if ev.window is not None:
                self.lines.append((len(ev.body.event_line), ev.carried))

        def spy_rank(*args, **kwargs):
            try:
                parts = windowed(*args, **kwargs)
            except NotInTimeOrder:
                self.whole += 1
                raise
            self.windowed += 1
            return parts

        monkeypatch.setattr(events.Events, "__init__", spy_init)
        monkeypatch.setattr(stream, "import_rank", spy_rank)


def test_windows_hold_about_window_lines_whatever_the_length(tmp_path, monkeypatch):
    """The 8-rank sample in windows of 64 event lines: each window's events are the window's lines (plus the few
    lines that finish its last instant, and the pairs carried open), far fewer than a rank's; equal to in memory."""
    seen = _Seen(monkeypatch)
    out = export_paraver("sample_traces/small_8ranks_3d.parquet", tmp_path / "r8")
    same_as_in_memory(out.prv, tmp_path, window_lines=64)
    new = [lines - carried for lines, carried in seen.lines]
    per_rank = sum(new) / 8
    assert seen.windowed == 8 and seen.whole == 0 and len(new) >= sum(new) / (64 + 16) > 8 * 40
    assert max(new) <= 64 + 16 < per_rank / 40
    assert max(carried for _, carried in seen.lines) <= 16


def test_a_rank_whose_lines_go_back_in_time_is_imported_whole(tmp_path, monkeypatch):
    """Paraver asks for lines in time order; a file that breaks it still imports, the rank whole."""
    lines = hand.EVENTS.splitlines()
    body = [ln for ln in lines[1:] if ln.startswith("2:")]
    text = "\n".join([lines[0], *[ln for ln in lines[1:] if not ln.startswith("2:")], *body[::-1]]) + "\n"
    seen = _Seen(monkeypatch)
    same_as_in_memory(hand.write(tmp_path, text, hand.PCF), tmp_path, window_lines=1)
    assert seen.whole == 1 and seen.windowed == 0


def test_a_window_needs_a_line(tmp_path):
    from gpt2trace.interop.paraver_stream import import_paraver_to
    with pytest.raises(ValueError, match="window_lines must be at least 1"):
        import_paraver_to(hand.write(tmp_path, hand.EVENTS, hand.PCF), tmp_path / "out.parquet", window_lines=0)
    assert not (tmp_path / "out.parquet").exists()
