//! Reference cycles: one collection's garbage split into separate cycles, and for each the
//! loop of references that keeps it alive and the path from that loop to every tensor.

use std::collections::VecDeque;

use serde::Serialize;

use crate::model::{Cycle, CycleEdge};

/// Split one collection's graph into its weakly connected parts that hold a tensor: each is
/// a cycle of its own (one collection often frees several unrelated ones).
pub fn split_into_cycles(c: Cycle) -> Vec<Cycle> {
    let n = c.nodes.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(p: &mut [usize], mut x: usize) -> usize {
        while p[x] != x {
            p[x] = p[p[x]];
            x = p[x];
        }
        x
    }
    for e in &c.edges {
        let (a, b) = (find(&mut parent, e.from), find(&mut parent, e.to));
        if a != b {
            parent[a.max(b)] = a.min(b);
        }
    }
    let roots: Vec<usize> = (0..n).map(|i| find(&mut parent, i)).collect();
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, &r) in roots.iter().enumerate() {
        match groups.iter_mut().find(|(root, _)| *root == r) {
            Some((_, members)) => members.push(i),
            None => groups.push((r, vec![i])),
        }
    }
    let mut out = Vec::new();
    for (_, members) in groups {
        if !members.iter().any(|&i| c.nodes[i].tensor.is_some()) {
            continue;
        }
        let mut new_index = vec![usize::MAX; n];
        for (k, &i) in members.iter().enumerate() {
            new_index[i] = k;
        }
        out.push(Cycle {
            op_index: c.op_index,
            generation: c.generation,
            nodes: members.iter().map(|&i| c.nodes[i].clone()).collect(),
            edges: c
                .edges
                .iter()
                .filter(|e| new_index[e.from] != usize::MAX)
                .map(|e| CycleEdge {
                    from: new_index[e.from],
                    to: new_index[e.to],
                    label: e.label.clone(),
                })
                .collect(),
            omitted_nodes: if out.is_empty() { c.omitted_nodes } else { 0 },
        });
    }
    out
}

/// One step of a path: an object and the reference it holds to the next (None at the end).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Index of the object in `Cycle::nodes`.
    pub node: usize,
    /// The object's label on one line.
    pub object: String,
    /// Label of the reference to the next step's object (`__dict__`, `[0]`); None at the end.
    pub reference: Option<String>,
}

/// A path of references from an object of a cycle to a tensor the cycle keeps alive.
#[derive(Debug, Serialize)]
pub struct TensorPath {
    /// Index of the tensor's node in `Cycle::nodes`.
    pub node: usize,
    /// The tensor's label on one line (dtype, shape, device).
    pub tensor: String,
    /// Bytes of the tensor's storage.
    pub bytes: i64,
    /// From an object of the loop to the tensor.
    pub path: Vec<Step>,
    /// Where the tensor was allocated, innermost first; empty without the allocator's history.
    pub stack: Vec<String>,
}

/// What `memtrack cycles` says about one cycle.
#[derive(Debug, Serialize)]
pub struct CycleReport {
    /// 1 for the cycle that held the most bytes.
    pub number: usize,
    /// The op count when the collector found and freed the cycle.
    pub op_index: i64,
    /// The garbage-collector generation (0, 1, 2) of the collection that found it.
    pub generation: i64,
    /// Bytes of the tensors' storages it kept alive, each storage counted once.
    pub bytes: i64,
    /// Tensor objects in the cycle (storages shared by several counted for each).
    pub tensors: usize,
    /// Objects (nodes) of the cycle the agent reported.
    pub objects: usize,
    /// Objects the agent left out to keep the report small.
    pub omitted_objects: i64,
    /// The loop of references that kept it alive: the first object again at the end. Empty
    /// when the agent had to leave the loop out (very large garbage).
    pub cycle: Vec<Step>,
    /// One path per tensor, most bytes first.
    pub tensor_paths: Vec<TensorPath>,
    /// Where the loop's nodes are (for drawings that highlight it).
    #[serde(skip)]
    pub loop_nodes: Vec<usize>,
}

/// The cycles of a file, most bytes first (ties: earliest first), numbered from 1.
pub fn reports(cycles: &[Cycle]) -> Vec<(CycleReport, &Cycle)> {
    let mut order: Vec<&Cycle> = cycles.iter().collect();
    order.sort_by(|a, b| b.bytes().cmp(&a.bytes()).then(a.op_index.cmp(&b.op_index)));
    order
        .into_iter()
        .enumerate()
        .map(|(k, c)| (report(k + 1, c), c))
        .collect()
}

/// A node's label on one line.
pub fn short_label(c: &Cycle, i: usize) -> String {
    c.nodes[i].label.replace('\n', " ")
}

fn report(number: usize, c: &Cycle) -> CycleReport {
    let n = c.nodes.len();
    let mut out_edges: Vec<Vec<(usize, &str)>> = vec![Vec::new(); n];
    for e in &c.edges {
        out_edges[e.from].push((e.to, &e.label));
    }
    let loop_nodes = shortest_loop(c, &out_edges);
    let cycle = steps(c, &loop_nodes, &out_edges);
    // tensors: the shortest path from any loop object (or from anywhere, without a loop)
    let sources: Vec<usize> = if loop_nodes.is_empty() {
        (0..n).filter(|&i| c.nodes[i].tensor.is_none()).collect()
    } else {
        loop_nodes[..loop_nodes.len() - 1].to_vec()
    };
    let prev = bfs(&sources, &out_edges);
    let mut tensor_paths = Vec::new();
    for (i, node) in c.nodes.iter().enumerate() {
        let Some(t) = &node.tensor else { continue };
        let mut path = vec![i];
        let mut at = i;
        while let Some(p) = prev[at] {
            if p == at {
                break;
            }
            path.push(p);
            at = p;
        }
        path.reverse();
        tensor_paths.push(TensorPath {
            node: i,
            tensor: short_label(c, i),
            bytes: t.bytes,
            path: steps(c, &path, &out_edges),
            stack: t.stack.clone(),
        });
    }
    tensor_paths.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.node.cmp(&b.node)));
    CycleReport {
        number,
        op_index: c.op_index,
        generation: c.generation,
        bytes: c.bytes(),
        tensors: c.tensors(),
        objects: n,
        omitted_objects: c.omitted_nodes,
        cycle,
        tensor_paths,
        loop_nodes,
    }
}

fn steps(c: &Cycle, path: &[usize], out_edges: &[Vec<(usize, &str)>]) -> Vec<Step> {
    path.iter()
        .enumerate()
        .map(|(k, &i)| Step {
            node: i,
            object: short_label(c, i),
            reference: path.get(k + 1).map(|&j| {
                out_edges[i]
                    .iter()
                    .find(|(to, _)| *to == j)
                    .map_or("?", |(_, l)| *l)
                    .to_string()
            }),
        })
        .collect()
}

/// Breadth-first search from `sources`: each reached node's predecessor (a source is its
/// own).
fn bfs(sources: &[usize], out_edges: &[Vec<(usize, &str)>]) -> Vec<Option<usize>> {
    let mut prev = vec![None; out_edges.len()];
    let mut q = VecDeque::new();
    for &s in sources {
        if prev[s].is_none() {
            prev[s] = Some(s);
            q.push_back(s);
        }
    }
    while let Some(x) = q.pop_front() {
        for &(y, _) in &out_edges[x] {
            if prev[y].is_none() {
                prev[y] = Some(x);
                q.push_back(y);
            }
        }
    }
    prev
}

/// The shortest closed path in the largest strongly connected part, starting (and ending)
/// at its object nearest to a tensor; empty when the graph has no loop.
fn shortest_loop(c: &Cycle, out_edges: &[Vec<(usize, &str)>]) -> Vec<usize> {
    let comp = strongly_connected(out_edges);
    let n = out_edges.len();
    let mut sizes = vec![0usize; n];
    for &k in &comp {
        sizes[k] += 1;
    }
    let looped = |i: usize| sizes[comp[i]] > 1 || out_edges[i].iter().any(|&(j, _)| j == i);
    let Some(best) = (0..n)
        .filter(|&i| looped(i))
        .max_by_key(|&i| (sizes[comp[i]], std::cmp::Reverse(i)))
        .map(|i| comp[i])
    else {
        return Vec::new();
    };
    // distance to the nearest tensor, following references
    let mut rev: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, es) in out_edges.iter().enumerate() {
        for &(j, _) in es {
            rev[j].push(i);
        }
    }
    let mut dist = vec![usize::MAX; n];
    let mut q: VecDeque<usize> = (0..n).filter(|&i| c.nodes[i].tensor.is_some()).collect();
    for &t in &q {
        dist[t] = 0;
    }
    while let Some(x) = q.pop_front() {
        for &y in &rev[x] {
            if dist[y] == usize::MAX {
                dist[y] = dist[x] + 1;
                q.push_back(y);
            }
        }
    }
    let start = (0..n)
        .filter(|&i| comp[i] == best)
        .min_by_key(|&i| (dist[i], i))
        .expect("the component has a node");
    // shortest path start -> ... -> start inside the component
    let mut prev = vec![usize::MAX; n];
    let mut q = VecDeque::from([start]);
    while let Some(x) = q.pop_front() {
        for &(y, _) in &out_edges[x] {
            if comp[y] != best {
                continue;
            }
            if y == start {
                let mut middle = Vec::new();
                let mut at = x;
                while at != start {
                    middle.push(at);
                    at = prev[at];
                }
                middle.reverse();
                let mut path = vec![start];
                path.extend(middle);
                path.push(start);
                return path;
            }
            if prev[y] == usize::MAX {
                prev[y] = x;
                q.push_back(y);
            }
        }
    }
    Vec::new()
}

/// Tarjan's strongly connected components, iteratively: each node's component number.
fn strongly_connected(out_edges: &[Vec<(usize, &str)>]) -> Vec<usize> {
    let n = out_edges.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0; n]);
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut comp = vec![usize::MAX; n];
    let (mut next_index, mut next_comp) = (0, 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, usize)> = vec![(root, 0)];
        while let Some(&(v, k)) = work.last() {
            if k == 0 && index[v] == usize::MAX {
                index[v] = next_index;
                low[v] = next_index;
                next_index += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&(w, _)) = out_edges[v].get(k) {
                work.last_mut().expect("not empty").1 += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(u, _)) = work.last() {
                low[u] = low[u].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp[w] = next_comp;
                    if w == v {
                        break;
                    }
                }
                next_comp += 1;
            }
        }
    }
    comp
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{CycleNode, CycleTensor};

    fn node(label: &str) -> CycleNode {
        CycleNode {
            label: label.into(),
            type_name: label.into(),
            tensor: None,
        }
    }

    fn edge(from: usize, to: usize, label: &str) -> CycleEdge {
        CycleEdge {
            from,
            to,
            label: label.into(),
        }
    }

    /// Holder -> __dict__ -> dict -['me']-> Holder, dict -['t']-> Tensor; and apart from it a
    /// list that holds itself and a second tensor.
    pub(crate) fn sample() -> Cycle {
        let mut t = node("Tensor float32[256, 256] cpu");
        t.tensor = Some(CycleTensor {
            bytes: 262_144,
            storage: 1,
            shape: vec![256, 256],
            dtype: "float32".into(),
            device: "cpu".into(),
            stack: vec!["train.py:10:make".into()],
        });
        let mut t2 = node("Tensor float32[16] cpu");
        t2.tensor = Some(CycleTensor {
            bytes: 64,
            storage: 2,
            ..CycleTensor::default()
        });
        Cycle {
            op_index: 7,
            generation: 0,
            nodes: vec![t, node("Holder"), node("dict[2]"), node("list[2]"), t2],
            edges: vec![
                edge(1, 2, "__dict__"),
                edge(2, 1, "['me']"),
                edge(2, 0, "['t']"),
                edge(3, 3, "[0]"),
                edge(3, 4, "[1]"),
            ],
            omitted_nodes: 0,
        }
    }

    #[test]
    fn splits_components_and_finds_loops_and_paths() {
        let parts = split_into_cycles(sample());
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].nodes.len(), 3);
        assert_eq!(parts[0].bytes(), 262_144);
        let rs = reports(&parts);
        let (r, _) = &rs[0];
        assert_eq!(r.number, 1);
        let loop_text: Vec<String> = r.cycle.iter().map(|s| s.object.clone()).collect();
        // the loop starts at the object nearest to the tensor: the dict
        assert_eq!(loop_text, ["dict[2]", "Holder", "dict[2]"]);
        assert_eq!(r.cycle[0].reference.as_deref(), Some("['me']"));
        let p = &r.tensor_paths[0];
        assert_eq!(p.bytes, 262_144);
        let objs: Vec<&str> = p.path.iter().map(|s| s.object.as_str()).collect();
        assert_eq!(objs, ["dict[2]", "Tensor float32[256, 256] cpu"]);
        // the self-referencing list
        let (r2, _) = &rs[1];
        assert_eq!(r2.cycle.len(), 2, "{:?}", r2.cycle);
        assert_eq!(r2.bytes, 64);
    }
}
