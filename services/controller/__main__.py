"""`python -m services.controller`: how `serving up` and the controller image start it."""

from services.controller.process import main

main()
