"""What ``turnkeeper serve`` runs: the JSON API (:mod:`turnkeeper.api`) and the web
view's pages (:mod:`turnkeeper.web`, built on the API) in one application.

``turnkeeper.server.app.create_app`` builds it; ``python -m turnkeeper.server.openapi``
prints its OpenAPI description. The one package that imports both the API and the
web view, so neither imports the other's assembly.
"""
