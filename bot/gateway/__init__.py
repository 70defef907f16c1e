"""One process's wiring: the channel accounts, the parts of the message path started and stopped in order, live
reload, the cluster, status, metrics, the admin listener and the logs."""
