"""soak: adversarial verification and soak harness for lease-fenced stores."""

from soak.errors import HarnessError
from soak.spi import (
    BlobStore,
    FencedRunStore,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
    StoreError,
)

__version__ = "0.1.0"

__all__ = [
    "BlobStore",
    "FencedRunStore",
    "HarnessError",
    "JournalEntry",
    "JournalOrderError",
    "Lease",
    "LeaseHeldError",
    "RunMeta",
    "StoreBusyError",
    "StoreError",
    "__version__",
]
