from .fleet import Engine, Host
from .ledgers import Incident, KVPoolEntry
from .samples import Rollup, Sample, Series

__all__ = ["Engine", "Host", "Incident", "KVPoolEntry", "Rollup", "Sample", "Series"]
