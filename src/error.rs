//! Errors that reach the user, each with the exit code it maps to.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An input file that cannot be read or is not what memtrack reads.
    #[error("{}: {message}", crate::quote::path(path))]
    Input { path: PathBuf, message: String },
    /// Writing an output failed.
    #[error("{}: cannot write: {source}", crate::quote::path(path))]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Arguments that make no sense together.
    #[error("{0}")]
    Usage(String),
    /// Something this machine lacks for the command (an NVIDIA driver for `gpus`).
    #[error("{0}")]
    Unavailable(String),
    /// A check the user asked for did not pass (e.g. `diff --fail-over`).
    #[error("{0}")]
    CheckFailed(String),
    /// A drawing memtrack could not make: not the input's fault.
    #[error(transparent)]
    Draw(#[from] crate::render::error::DrawError),
}

impl Error {
    pub fn input(path: &Path, message: impl Into<String>) -> Error {
        Error::Input {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub fn output(path: &Path, source: std::io::Error) -> Error {
        Error::Output {
            path: path.to_path_buf(),
            source,
        }
    }

    /// 1 for a failed check, 2 for bad usage or unreadable input, 3 for a drawing memtrack
    /// could not make (docs/architecture.md, "Errors and exit codes").
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::CheckFailed(_) => 1,
            Error::Draw(_) => 3,
            _ => 2,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
