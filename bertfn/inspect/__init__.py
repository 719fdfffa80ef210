"""Seeing what the model computed.

    explorer.py     a recording as one self-contained HTML page (the explorer_page/ folder holds its script)
    page_arrays.py  what that page stores of a pass, and how precisely (also a trace's store: bertfn view)
    trace.py        trace(): one text through the model with every intermediate kept, as a Recording
    plots.py        attention maps and activation plots with matplotlib (imported only when drawn)
    contact_plots.py  ESM-2's contact maps, alone and beside a layer's attention maps
"""
