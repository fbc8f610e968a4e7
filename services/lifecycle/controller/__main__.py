"""`python -m services.lifecycle.controller`: how `serving up` and the controller image start it."""

from services.lifecycle.controller.process import main

main()
