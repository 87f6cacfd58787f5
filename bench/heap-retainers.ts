// What holds a V8 heap: reads a .heapsnapshot (written by `--heapsnapshot-signal`, as the
// scale benchmark does with BENCH_HEAP_SNAPSHOT=1) and prints its dominator tree — each
// object with the memory that would be freed if it alone were gone (its retained size) —
// down to the objects that hold at least a given share, plus the objects by constructor.
//
//   node bench/heap-retainers.ts FILE.heapsnapshot [--min-mib 1] [--depth 14] [--instances CheckRunner]...
//
// Written here because the one kept library that computes retained sizes (memlab) depends
// on puppeteer, which downloads a browser when installed (docs/decisions.md, "Where the
// memory goes"). The algorithm is Cooper, Harvey and Kennedy's "A Simple, Fast Dominance
// Algorithm" (2001) over the snapshot's strong edges, as Chrome's DevTools computes them.
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';

interface Snapshot {
  snapshot: {
    meta: {
      node_fields: string[];
      node_types: [string[], ...unknown[]];
      edge_fields: string[];
      edge_types: [string[], ...unknown[]];
    };
  };
  nodes: number[];
  edges: number[];
  strings: string[];
}

/** A parsed snapshot with its dominator tree: node i is nodes[i * nodeFields ...]. */
export interface HeapGraph {
  count: number;
  selfSize: Float64Array;
  retained: Float64Array;
  /** Immediate dominator of each node (-1: unreachable); the root is its own. */
  idom: Int32Array;
  /** The edge name by which the DFS first reached each node from its parent. */
  via: string[];
  label(node: number): string;
}

const MiB = 2 ** 20;

/** A name on one line and at most `max` characters (a key may hold a certificate). */
function oneLine(text: string, max: number): string {
  const line = text.replace(/\s+/g, ' ');
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

export function analyse(snap: Snapshot): HeapGraph {
  const { meta } = snap.snapshot;
  const nf = meta.node_fields.length;
  const ef = meta.edge_fields.length;
  const [nodeTypes] = meta.node_types;
  const [edgeTypes] = meta.edge_types;
  const typeField = meta.node_fields.indexOf('type');
  const nameField = meta.node_fields.indexOf('name');
  const sizeField = meta.node_fields.indexOf('self_size');
  const edgeCountField = meta.node_fields.indexOf('edge_count');
  const edgeTypeField = meta.edge_fields.indexOf('type');
  const edgeNameField = meta.edge_fields.indexOf('name_or_index');
  const toField = meta.edge_fields.indexOf('to_node');
  const weak = edgeTypes.indexOf('weak');
  const count = snap.nodes.length / nf;
  const firstEdge = new Uint32Array(count + 1);
  for (let i = 0; i < count; i++)
    firstEdge[i + 1] = (firstEdge[i] as number) + (snap.nodes[i * nf + edgeCountField] as number) * ef;
  const selfSize = new Float64Array(count);
  for (let i = 0; i < count; i++) selfSize[i] = snap.nodes[i * nf + sizeField] as number;
  const strong = (e: number) => snap.edges[e + edgeTypeField] !== weak;
  const target = (e: number) => (snap.edges[e + toField] as number) / nf;
  const edgeName = (e: number): string => {
    const type = edgeTypes[snap.edges[e + edgeTypeField] as number];
    const value = snap.edges[e + edgeNameField] as number;
    return type === 'element' || type === 'hidden'
      ? `[${String(value)}]`
      : oneLine(snap.strings[value] ?? '?', 50);
  };

  // Depth-first from the root (node 0): postorder numbers, and the edge each node came by.
  const post = new Int32Array(count).fill(-1);
  const order: number[] = [];
  const viaEdge = new Int32Array(count).fill(-1);
  const visited = new Uint8Array(count);
  const stack: number[] = [0];
  const cursor = new Uint32Array(count);
  visited[0] = 1;
  cursor[0] = firstEdge[0] as number;
  while (stack.length > 0) {
    const v = stack[stack.length - 1] as number;
    const end = firstEdge[v + 1] as number;
    let e = cursor[v] as number;
    while (e < end && (!strong(e) || visited[target(e)])) e += ef;
    if (e < end) {
      cursor[v] = e + ef;
      const w = target(e);
      visited[w] = 1;
      viaEdge[w] = e;
      cursor[w] = firstEdge[w] as number;
      stack.push(w);
    } else {
      cursor[v] = end;
      post[v] = order.length;
      order.push(v);
      stack.pop();
    }
  }

  // Predecessors over strong edges among reachable nodes (compressed rows).
  const predCount = new Uint32Array(count + 1);
  for (let v = 0; v < count; v++) {
    if (!visited[v]) continue;
    for (let e = firstEdge[v] as number; e < (firstEdge[v + 1] as number); e += ef)
      if (strong(e)) predCount[target(e) + 1] = (predCount[target(e) + 1] as number) + 1;
  }
  for (let i = 0; i < count; i++) predCount[i + 1] = (predCount[i + 1] as number) + (predCount[i] as number);
  const preds = new Int32Array(predCount[count] as number);
  const fill = predCount.slice(0, count);
  for (let v = 0; v < count; v++) {
    if (!visited[v]) continue;
    for (let e = firstEdge[v] as number; e < (firstEdge[v + 1] as number); e += ef) {
      if (!strong(e)) continue;
      const w = target(e);
      preds[fill[w] as number] = v;
      fill[w] = (fill[w] as number) + 1;
    }
  }

  // Cooper-Harvey-Kennedy: iterate in reverse postorder until nothing changes.
  const idom = new Int32Array(count).fill(-1);
  idom[0] = 0;
  const intersect = (a: number, b: number) => {
    while (a !== b) {
      while ((post[a] as number) < (post[b] as number)) a = idom[a] as number;
      while ((post[b] as number) < (post[a] as number)) b = idom[b] as number;
    }
    return a;
  };
  for (let changed = true; changed;) {
    changed = false;
    for (let i = order.length - 2; i >= 0; i--) {
      const v = order[i] as number;
      let next = -1;
      for (let p = predCount[v] as number; p < (predCount[v + 1] as number); p++) {
        const u = preds[p] as number;
        if (idom[u] === -1) continue;
        next = next === -1 ? u : intersect(u, next);
      }
      if (next !== -1 && idom[v] !== next) {
        idom[v] = next;
        changed = true;
      }
    }
  }

  // A dominator is a DFS ancestor, so it comes later in postorder: sum children first.
  const retained = Float64Array.from(selfSize);
  for (const v of order) {
    const d = idom[v] as number;
    if (v !== 0) retained[d] = (retained[d] as number) + (retained[v] as number);
  }
  const via = Array.from({ length: count }, (_, v) =>
    viaEdge[v] === -1 ? '' : edgeName(viaEdge[v] as number),
  );
  const label = (v: number) => {
    const type = nodeTypes[snap.nodes[v * nf + typeField] as number] ?? '?';
    const name = snap.strings[snap.nodes[v * nf + nameField] as number] ?? '';
    if (type === 'object' || type === 'native') return oneLine(name, 60);
    if (type === 'closure') return `${oneLine(name, 60) || '(anonymous)'}()`;
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string') return '(string)';
    return `(${type}${name ? ` ${oneLine(name, 40)}` : ''})`;
  };
  return { count, selfSize, retained, idom, via, label };
}

/** The dominator tree down to nodes retaining at least minBytes, as indented lines (from `top`, default the root). */
export function dominatorTree(graph: HeapGraph, minBytes: number, maxDepth: number, top = 0): string[] {
  const children = new Map<number, number[]>();
  for (let v = 1; v < graph.count; v++) {
    const d = graph.idom[v] as number;
    if (d < 0 || (graph.retained[v] as number) < minBytes) continue;
    let list = children.get(d);
    if (!list) children.set(d, (list = []));
    list.push(v);
  }
  const lines: string[] = [];
  const walk = (v: number, depth: number) => {
    const kids = (children.get(v) ?? []).sort(
      (a, b) => (graph.retained[b] as number) - (graph.retained[a] as number),
    );
    for (const k of kids) {
      const size = `${((graph.retained[k] as number) / MiB).toFixed(1).padStart(7)} MiB`;
      lines.push(
        `${size}  ${'  '.repeat(depth)}${graph.via[k] ? `.${graph.via[k]} → ` : ''}${graph.label(k)}`,
      );
      if (depth < maxDepth) walk(k, depth + 1);
    }
  };
  walk(top, 0);
  return lines;
}

/**
 * What grew from `before` to `after`, by constructor, divided by `per` (the checks or Nodes
 * added between the two): what each one costs, and in which objects.
 */
export function growthByConstructor(before: HeapGraph, after: HeapGraph, per: number, top: number): string[] {
  const a = groupByConstructor(before);
  const rows = [...groupByConstructor(after)].map(([key, g]) => {
    const was = a.get(key) ?? { count: 0, self: 0 };
    return { key, count: (g.count - was.count) / per, bytes: (g.self - was.self) / per };
  });
  const totalBytes = rows.reduce((sum, r) => sum + r.bytes, 0);
  return [
    `${(totalBytes / 1024).toFixed(2).padStart(8)} KiB each in all`,
    ...rows
      .sort((x, y) => y.bytes - x.bytes)
      .slice(0, top)
      .map(
        (r) => `${(r.bytes / 1024).toFixed(2).padStart(8)} KiB  ${r.count.toFixed(1).padStart(7)} × ${r.key}`,
      ),
  ];
}

/** Every object of a constructor (`CheckRunner`, `Informer`) with what it retains, largest first. */
export function instancesOf(graph: HeapGraph, name: string, minBytes: number, maxDepth: number): string[] {
  const found: number[] = [];
  for (let v = 0; v < graph.count; v++) if (graph.idom[v] !== -1 && graph.label(v) === name) found.push(v);
  return found
    .sort((a, b) => (graph.retained[b] as number) - (graph.retained[a] as number))
    .slice(0, 5)
    .flatMap((v) => [
      `${((graph.retained[v] as number) / MiB).toFixed(2).padStart(7)} MiB  ${name} (.${graph.via[v] ?? ''})`,
      ...dominatorTree(graph, minBytes, maxDepth, v).map((line) => `  ${line}`),
    ]);
}

/** Objects grouped by label: how many, and their own sizes. */
function groupByConstructor(graph: HeapGraph): Map<string, { count: number; self: number }> {
  const groups = new Map<string, { count: number; self: number }>();
  for (let v = 0; v < graph.count; v++) {
    if (graph.idom[v] === -1) continue;
    const key = graph.label(v);
    const g = groups.get(key) ?? { count: 0, self: 0 };
    g.count++;
    g.self += graph.selfSize[v] as number;
    groups.set(key, g);
  }
  return groups;
}

/** Objects grouped by label: how many, and their own sizes, the largest groups first. */
export function byConstructor(graph: HeapGraph, top: number): string[] {
  return [...groupByConstructor(graph)]
    .sort((a, b) => b[1].self - a[1].self)
    .slice(0, top)
    .map(
      ([key, g]) => `${(g.self / MiB).toFixed(1).padStart(7)} MiB  ${String(g.count).padStart(8)} × ${key}`,
    );
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      'min-mib': { type: 'string', default: '1' },
      depth: { type: 'string', default: '14' },
      instances: { type: 'string', multiple: true, default: [] },
      // --diff BEFORE.heapsnapshot --per 900: what grew from BEFORE to FILE, per unit added.
      diff: { type: 'string' },
      per: { type: 'string', default: '1' },
    },
  });
  const load = async (file: string) => analyse(JSON.parse(await readFile(file, 'utf8')) as Snapshot);
  if (values.diff !== undefined) {
    const [file] = positionals;
    if (file === undefined) throw new Error('--diff BEFORE needs the later snapshot as FILE');
    process.stdout.write(`\ngrowth from ${values.diff} to ${file}, per ${values.per} added:\n`);
    for (const line of growthByConstructor(await load(values.diff), await load(file), Number(values.per), 25))
      process.stdout.write(`${line}\n`);
    process.exit(0);
  }
  for (const file of positionals) {
    const graph = await load(file);
    const total = graph.retained[0] as number;
    process.stdout.write(
      `\n${file}: ${(total / MiB).toFixed(1)} MiB reachable, ${String(graph.count)} objects\n`,
    );
    process.stdout.write(`\nretained by (dominator tree, ≥ ${values['min-mib']} MiB):\n`);
    for (const line of dominatorTree(graph, Number(values['min-mib']) * MiB, Number(values.depth)))
      process.stdout.write(`${line}\n`);
    for (const name of values.instances) {
      process.stdout.write(`\n${name}, by what it retains (≥ 16 KiB):\n`);
      for (const line of instancesOf(graph, name, 16 * 1024, 3)) process.stdout.write(`${line}\n`);
    }
    process.stdout.write('\nown size by constructor (top 25):\n');
    for (const line of byConstructor(graph, 25)) process.stdout.write(`${line}\n`);
  }
}
