"""HTTP routes: thin handlers that parse, authenticate and delegate."""
