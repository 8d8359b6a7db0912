"""The daemon's composition root: services, loops and the tool table wired to the socket transport."""
