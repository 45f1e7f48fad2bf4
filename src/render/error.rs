//! What can go wrong when drawing: a chart the plotting library could not draw, or a drawing
//! that could not be rendered as a PNG. Neither is the input's fault (exit code 3).

/// A drawing that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DrawError {
    /// The plotting library failed on the chart.
    #[error("cannot draw the plot: {0}")]
    Plot(String),
    /// The SVG could not be turned into a PNG (parse, size, or encoding).
    #[error("{0}")]
    Png(String),
}
