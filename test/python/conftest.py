# mlircap is imported from this checkout's python/ through pytest.ini's `pythonpath`
# (ahead of any installed mlircap); no sys.path changes here.
import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
