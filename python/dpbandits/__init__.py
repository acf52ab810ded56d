"""dpbandits for Python: differentially private bandit algorithms on a Rust core.

* ``Policy(kind, *, seed=0, while_pending="wait", **params)``: any registry kind, one decision at a
  time (``choose`` / ``observe``; BAI ``recommend`` / ``stopped``), ``snapshot`` / ``restore``,
  pickling; ``while_pending="pipeline"`` serves decisions while rewards are pending (``decide``
  returns a :class:`Decision` ``(decision_id, arm)``, ``observe_decision`` takes its reward in any
  order).
* ``Environment(kind, *, master_seed=0, run=0, horizon=None, seed=None, **params)``: a built-in
  environment of any setting drawing exactly the CLI's random streams of run ``run``
  (``Environment.from_spec(spec, run)``).
* ``run(spec, runs=, horizon=, threads=, executor=, env=, progress=)``: an experiment file (path,
  TOML text or dict) run locally or sharded on a Ray / Dask / ``concurrent.futures`` executor,
  returned as a :class:`Result` (``summary`` DataFrame, ``runs`` arrays, ``manifest``, ``save``).

See docs/python.md.
"""

# The HTTP client of `dpbandits serve` (`dpbandits.service`) is standard library only: it imports
# without the compiled core and numpy (e.g. in a service's client container). Everything else
# needs them; without them, each name of the API raises an ImportError that says what is missing.
from __future__ import annotations

from typing import Any

try:
    from . import _native  # noqa: F401  (the compiled core)
    import numpy  # noqa: F401
except ImportError as _e:  # pragma: no cover - exercised by test_service_client's subprocess
    _missing: "ImportError | None" = _e
else:
    _missing = None

if _missing is None:
    from ._api import *  # noqa: F401,F403
    from ._api import __all__, __version__  # noqa: F401
else:
    __all__ = ["service"]
    __version__ = "unknown (the compiled core is missing)"

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(
            f"dpbandits.{name} needs the compiled core (dpbandits._native) and numpy, which did not "
            f"import ({_missing}); install the wheel (pip install dpbandits) or build it "
            "(pip install ./python). dpbandits.service, the HTTP client, works without them."
        )
