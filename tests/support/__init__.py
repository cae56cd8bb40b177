"""What the tests share, by concern (no test module imports another): the SparkSession (session),
the Kafka broker and connector (kafka), child processes killed mid-run (children), sinks and
checkpoint files read back (sinks), input fed to queries (inputs), JMX and executor metrics
(metrics); the scripts the tests start as child processes (*_child.py, crash_soak.py,
realtime_soak.py, connect_client.py) and what several feature folders share (golden_scenarios,
composition, suppress, sessions; suppress also defines the fixtures tests/suppress/conftest.py
and tests/sessions/conftest.py give their tests). tests/ is on sys.path (pyproject's pythonpath; each
child script inserts it), so everything imports as `support.<module>`."""
