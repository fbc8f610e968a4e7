"""No module of the tree (`services`, `observability`, `loadtest`) imports itself back, through any chain of imports
(those under `TYPE_CHECKING` too): every import between them points one way."""

import grimp


def test_no_import_in_the_tree_comes_back_to_its_importer():
    graph = grimp.build_graph("services", "observability", "loadtest", cache_dir=None)
    imports = [
        (importer, imported)
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
    ]
    assert len(imports) > 500, "the graph holds the packages' imports"
    back = [(a, b) for a, b in imports if graph.chain_exists(importer=b, imported=a)]
    assert back == [], f"each of these imports is part of a cycle: {back}"
