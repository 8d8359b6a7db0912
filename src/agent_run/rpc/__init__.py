"""The Unix-socket JSON-RPC 2.0 transport: the daemon's server and the clients' side."""
