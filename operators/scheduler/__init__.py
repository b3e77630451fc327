"""The pure scheduling core: snapshot in, decisions out. No kopf, no client, no I/O, no clock."""
