"""Availability: uptime per engine and per box over a day, week or month, from the alert records
(the incidents), with planned work (maintenance windows, restarts SparkOps ran) shown apart."""
