"""Services: admission, views, waiting, commands and reconciliation, over the store."""
