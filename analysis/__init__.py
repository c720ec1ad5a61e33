"""Pure analyses of traces: a trace in, tables out (see docs/analyze.md)."""
