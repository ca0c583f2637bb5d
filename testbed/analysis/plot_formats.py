"""The plot file formats (`--plot-format`): its own module so that the command line's parser
names them without importing matplotlib (testbed.analysis.plots draws them)."""

PLOT_FORMATS = ("png", "svg", "pdf")
"""What `--plot-format` takes: PNG for a report read in a browser, SVG and PDF for papers."""
