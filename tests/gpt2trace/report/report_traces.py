"""Names shared by the report tests and their fixtures (conftest.py)."""

# Strings that would run script if any of them reached the DOM unescaped; each sets window.__pwned.
KERNEL_EVIL = '<img src=x onerror="window.__pwned=1;alert(1)">'
PHASE_EVIL = "</script><script>window.__pwned=2;alert(2)</script>"
MPI_EVIL = '"><svg onload="window.__pwned=3;alert(3)">'
META_EVIL = "<iframe srcdoc=\"<script>parent.__pwned=4</script>\"></iframe>"
FILE_EVIL = "<img src=x onerror=alert(5)>.parquet"
