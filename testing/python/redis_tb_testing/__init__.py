"""The Python test harness of the repository: real redis-server (with the module) and
uvicorn/gunicorn processes on free loopback ports (``redis_tb_testing.servers``).

Shared by the Python package's own tests (its tests folder), the Python examples' tests
(examples/*) and the integration benchmarks (bench/integrations/python). pytest finds it
through ``pythonpath`` in clients/python/pyproject.toml; the benchmarks, run as scripts,
put ``testing/python`` on ``sys.path`` themselves.
"""
