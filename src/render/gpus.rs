//! `gpus`: devices and their processes, as text, Markdown, CSV or JSON.

use crate::model::gpu::GpuList;
use crate::model::{format_bytes, Units};

use super::document::Document;
use super::table::{or_empty, Table};
use super::Format;

/// Devices and their processes in `format`.
pub fn gpus(list: &GpuList, format: Format, units: Units) -> String {
    match format {
        Format::Json => serde_json::to_string(list).expect("gpu lists serialize") + "\n",
        Format::Csv => csv(list),
        Format::Text | Format::Markdown => {
            let mut doc = Document::new(format);
            let b = |x: u64| format_bytes(x as f64, units);
            let mut head = String::from("NVIDIA driver ");
            head.push_str(list.driver_version.as_deref().unwrap_or("?"));
            if let Some(c) = &list.cuda_driver_version {
                head.push_str(&format!(", CUDA {c}"));
            }
            head.push_str(&format!(
                ", {} GPU{}",
                list.gpus.len(),
                if list.gpus.len() == 1 { "" } else { "s" }
            ));
            doc.para(&head);
            doc.gap();
            let mut t = Table::new(&[
                ">gpu",
                "name",
                ">total",
                ">used",
                ">free",
                ">reserved",
                ">processes",
            ]);
            for g in &list.gpus {
                t.row(vec![
                    g.index.to_string(),
                    g.name.clone(),
                    b(g.total_bytes),
                    b(g.used_bytes),
                    b(g.free_bytes),
                    b(g.reserved_bytes),
                    g.processes.len().to_string(),
                ]);
            }
            doc.table(&t);
            doc.heading(if doc.is_markdown() {
                "Processes"
            } else {
                "Processes (GPU memory as the driver counts it: everything the process holds on the device)"
            });
            let mut p = Table::new(&[">gpu", ">pid", "type", ">gpu memory", "command"]);
            for g in &list.gpus {
                if g.processes.is_empty() {
                    p.row(vec![
                        g.index.to_string(),
                        "-".into(),
                        "-".into(),
                        "-".into(),
                        "no processes are running".into(),
                    ]);
                }
                for pr in &g.processes {
                    p.row(vec![
                        g.index.to_string(),
                        pr.pid.to_string(),
                        pr.kind.into(),
                        pr.used_bytes.map_or_else(|| "n/a".into(), b),
                        pr.command.clone().unwrap_or_else(|| "?".into()),
                    ]);
                }
            }
            doc.table(&p);
            // the notes come right under the table
            doc.close_up();
            for g in &list.gpus {
                for e in &g.errors {
                    doc.line(&format!("note: GPU {}: {e}", g.index));
                }
            }
            doc.finish()
        }
    }
}

/// One row per process (a GPU without processes: one row with empty process fields).
fn csv(list: &GpuList) -> String {
    let mut t = Table::new(&[
        "gpu",
        "name",
        "uuid",
        "total_bytes",
        "used_bytes",
        "free_bytes",
        "pid",
        "type",
        "process_used_bytes",
        "command",
    ]);
    for g in &list.gpus {
        let dev = vec![
            g.index.to_string(),
            g.name.clone(),
            g.uuid.clone().unwrap_or_default(),
            g.total_bytes.to_string(),
            g.used_bytes.to_string(),
            g.free_bytes.to_string(),
        ];
        if g.processes.is_empty() {
            let mut r = dev.clone();
            r.extend(["", "", "", ""].map(String::from));
            t.row(r);
        }
        for p in &g.processes {
            let mut r = dev.clone();
            r.extend([
                p.pid.to_string(),
                p.kind.to_string(),
                or_empty(p.used_bytes),
                p.command.clone().unwrap_or_default(),
            ]);
            t.row(r);
        }
    }
    t.csv()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu::{Gpu, GpuProcess};

    fn list() -> GpuList {
        GpuList {
            driver_version: Some("550.54.15".into()),
            cuda_driver_version: Some("12.4".into()),
            gpus: vec![
                Gpu {
                    index: 0,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    total_bytes: 80 << 30,
                    used_bytes: 3 << 30,
                    free_bytes: 77 << 30,
                    processes: vec![GpuProcess {
                        pid: 4242,
                        kind: "compute",
                        used_bytes: Some(2 << 30),
                        command: Some("python train.py".into()),
                    }],
                    ..Gpu::default()
                },
                Gpu {
                    index: 1,
                    name: "NVIDIA H100 80GB HBM3".into(),
                    total_bytes: 80 << 30,
                    ..Gpu::default()
                },
            ],
        }
    }

    #[test]
    fn text_lists_devices_and_processes() {
        let t = gpus(&list(), Format::Text, Units::Auto);
        assert!(
            t.starts_with("NVIDIA driver 550.54.15, CUDA 12.4, 2 GPUs"),
            "{t}"
        );
        assert!(t.contains("80.00 GiB"), "{t}");
        assert!(t.contains("python train.py"), "{t}");
        assert!(t.contains("no processes are running"), "{t}");
        let c = gpus(&list(), Format::Csv, Units::Auto);
        assert_eq!(c.lines().count(), 3, "{c}");
        assert!(
            c.contains(",4242,compute,2147483648,python train.py"),
            "{c}"
        );
        let j: serde_json::Value =
            serde_json::from_str(&gpus(&list(), Format::Json, Units::B)).unwrap();
        assert_eq!(j["gpus"][0]["processes"][0]["used_bytes"], 2147483648u64);
    }
}
