from .fleet import Engine, Host
from .ledgers import Incident, KVPoolEntry
from .samples import CollectorState, Rollup, Sample, Series

__all__ = ["CollectorState", "Engine", "Host", "Incident", "KVPoolEntry", "Rollup", "Sample", "Series"]
