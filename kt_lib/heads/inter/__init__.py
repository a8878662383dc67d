"""SimAKT's inter-student heads (seed 000, Step 2): Block 3's heads that attend over memory banks
of training students.

- `base`: the head interface (`BaseSimilarityHead`: `forward`, or `attend` with maps), the
  registry `SIMILARITY_HEADS`, the context a head reads, content metrics, custom-module lookup;
- `trajectory`: the cluster and KNN heads (content or temporal-strategy scoring);
- `heads`: the graph, cross-student attention, hybrid and DeepSet heads, and
  `InterStudentHeads`, the module Block 3 calls;
- `seed_adapter`: custom modules written to seed 000's interface.
Their configuration language is `kt_lib.heads.simakt_config`.
"""

from . import seed_adapter  # noqa: F401 -- registers the adapter of seed 000's module interface
from .heads import *  # noqa: F403 -- the public names, listed once in heads.__all__
from .heads import __all__  # noqa: F401
