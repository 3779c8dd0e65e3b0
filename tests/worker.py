"""A server worker process for multi-process tests: the scenario app on uvicorn, configured by
``RAGSTREAM_*`` environment variables.  ``python -m tests.worker PORT``"""

from __future__ import annotations

import sys

import uvicorn

from ragstream.config import AppConfig
from tests.conftest import scenario_app

if __name__ == "__main__":
    uvicorn.run(scenario_app(AppConfig()), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
