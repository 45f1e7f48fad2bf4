//! The formats layer's error: a file of a known kind whose layout is not what that kind has.
//! The message says where in the file and what was found ("markers['fw_start']: expected an
//! int"); the command boundary names the file (`Error::Input`).

/// A layout error: where in the file, and what was wrong there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

impl From<String> for LayoutError {
    fn from(message: String) -> Self {
        LayoutError(message)
    }
}

impl From<&str> for LayoutError {
    fn from(message: &str) -> Self {
        LayoutError(message.to_string())
    }
}

impl From<LayoutError> for String {
    fn from(e: LayoutError) -> Self {
        e.0
    }
}

/// What converting a decoded file into the model gives.
pub type Parse<T> = std::result::Result<T, LayoutError>;
