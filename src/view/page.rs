//! The page of `memtrack view`: one HTML file and its script, embedded in the binary
//! (`include_str!`), the script inlined into the page when it is served. No CDN, no front-end
//! build: what is in `page.html` and the `page_*.js` modules is what the browser runs. The
//! modules share one scope, in this order: the core (state, routes, scales, the URL
//! fragment), the timeline, stats files, what the user does, the overview strip and segment
//! timeline under the chart, a view saved as one file, and the tests' probe (which starts the
//! page).

const HTML: &str = include_str!("page.html");
const SCRIPT: &str = concat!(
    include_str!("page_core.js"),
    include_str!("page_chart.js"),
    include_str!("page_stats.js"),
    include_str!("page_interact.js"),
    include_str!("page_overview.js"),
    include_str!("page_save.js"),
    include_str!("page_probe.js"),
);

/// The page for a capture named `title` of `kind` (`snapshot` or `stats`).
pub fn html(title: &str, kind: &str) -> String {
    HTML.replace("{{TITLE}}", &escape(title))
        .replace("{{KIND}}", kind)
        .replace("{{SCRIPT}}", &SCRIPT.replace("</", "<\\/"))
}

/// Text safe inside HTML elements and attributes.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_is_self_contained_and_the_title_escaped() {
        let page = super::html("a<b>.pickle", "snapshot");
        assert!(page.contains("a&lt;b&gt;.pickle"));
        assert!(!page.contains("{{"));
        assert!(!page.contains("<script src") && !page.contains("<link"));
        assert!(!page.contains("http://") && !page.contains("https://"));
    }
}
