//! What a drawing command writes, chosen by the output's extension: SVG, or PNG rendered from
//! the same SVG (resvg, with the embedded DejaVu Sans so text looks the same everywhere), or a
//! command's own HTML. Any other extension is refused: never an SVG under another name.

use std::path::Path;
use std::sync::Arc;

use resvg::{tiny_skia, usvg};

use super::error::DrawError;
use crate::error::{Error, Result};

static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PictureKind {
    Svg,
    Png,
    Html,
}

impl PictureKind {
    fn name(self) -> &'static str {
        match self {
            PictureKind::Svg => ".svg",
            PictureKind::Png => ".png",
            PictureKind::Html => ".html",
        }
    }
}

/// The kind `path` asks for, among `allowed`; `-` (stdout) is SVG.
pub fn kind_of(path: &Path, allowed: &[PictureKind]) -> Result<PictureKind> {
    if path.as_os_str() == "-" {
        return Ok(PictureKind::Svg);
    }
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let kind = match ext.as_deref() {
        Some("svg") => Some(PictureKind::Svg),
        Some("png") => Some(PictureKind::Png),
        Some("html" | "htm") => Some(PictureKind::Html),
        _ => None,
    };
    match kind {
        Some(k) if allowed.contains(&k) => Ok(k),
        _ => {
            let names: Vec<&str> = allowed.iter().map(|k| k.name()).collect();
            Err(Error::Usage(format!(
                "{}: cannot tell what to draw from the name; this command writes {} (or `-` for SVG on stdout)",
                crate::quote::path(path),
                names.join(", ")
            )))
        }
    }
}

/// An SVG document rendered to PNG, at its own size (`scale` 1) or larger.
pub fn png(svg: &str, scale: f32) -> std::result::Result<Vec<u8>, DrawError> {
    let mut opt = usvg::Options::default();
    {
        let db = Arc::make_mut(&mut opt.fontdb);
        db.load_font_data(FONT.to_vec());
        db.set_sans_serif_family("DejaVu Sans");
        // the monospace text of some drawings: the system's if it has one, else DejaVu Sans
        match std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf") {
            Ok(mono) => {
                db.load_font_data(mono);
                db.set_monospace_family("DejaVu Sans Mono");
            }
            Err(_) => db.set_monospace_family("DejaVu Sans"),
        }
    }
    opt.font_family = "DejaVu Sans".into();
    let tree = usvg::Tree::from_str(svg, &opt)
        .map_err(|e| DrawError::Png(format!("cannot render the drawing as PNG: {e}")))?;
    let size = tree.size().to_int_size().scale_by(scale).ok_or_else(|| {
        DrawError::Png("cannot render the drawing as PNG: it has no size".to_string())
    })?;
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        DrawError::Png(format!(
            "cannot render a {}x{} PNG",
            size.width(),
            size.height()
        ))
    })?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    pixmap
        .encode_png()
        .map_err(|e| DrawError::Png(format!("cannot encode the PNG: {e}")))
}

/// The drawing in the kind asked for; `html` builds the page when the command has one.
pub fn encode(
    kind: PictureKind,
    svg: &str,
    html: impl FnOnce() -> String,
) -> std::result::Result<Vec<u8>, DrawError> {
    Ok(match kind {
        PictureKind::Svg => svg.as_bytes().to_vec(),
        PictureKind::Png => png(svg, 1.0)?,
        PictureKind::Html => html().into_bytes(),
    })
}
