"""Operating the server: traces (OpenTelemetry), metrics (Prometheus) and JSON logs.

The lowest layer of ``ragstream``: it knows nothing of runs, AG-UI or HTTP, and every layer above
reports through it. See server/NOTES.md, "Observability".
"""
