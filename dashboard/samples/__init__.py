"""The sample store: the time series every poll writes and every chart and rule reads.

`store.py` is its write side (samples in, rollups, retention); the models are
`dashboard/models/samples.py` and the read side is `dashboard/selectors/series.py`."""
