"""Helpers every test tier shares: model directories (`models`), real servers on free ports (`servers`), and a
server with a known delay for checking the load generator (`delay_server`)."""
