// Fails when src/ has an import cycle: between files, or between folders (src/actions,
// src/hooks, …; a file directly in src/ counts as a folder of its own). Type-only imports
// count too: a cycle through types still ties two modules together. It also fails when a
// folder imports one of a later layer (LAYERS), or when a folder has no layer yet.
//
//   node scripts/check-cycles.ts
//
// Imports are read with the TypeScript compiler's own pre-processor (no type checking,
// so it takes well under a second); only relative imports within src/ matter.
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const src = join(root, 'src');

type Graph = Map<string, Set<string>>;

/**
 * The layers of src/, lowest first: a folder may import its own layer's and lower ones.
 * Within a layer, the cycle check keeps imports one-way.
 */
const LAYERS: readonly (readonly string[])[] = [
  ['duration.ts', 'redact.ts', 'log.ts', 'wait.ts', 'metrics.ts', 'cache-dir.ts', 'canonical-json.ts'],
  ['api/'],
  ['kube/'],
  ['checks/', 'hooks/', 'talos/', 'policies/', 'silences/', 'manifests/', 'notifications/'],
  ['actions/', 'boots/', 'rollouts/', 'cluster-api/'],
  ['http/', 'talos-gate/'],
  ['controller.ts'],
  ['demo/'],
  ['cli/'],
];

function layerOf(folder: string): number | undefined {
  const index = LAYERS.findIndex((layer) => layer.includes(folder));
  return index < 0 ? undefined : index;
}

async function sourceFiles(): Promise<string[]> {
  const entries = await readdir(src, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name))
    .sort();
}

/** The src/ files a file imports, as paths relative to src/. */
async function importsOf(file: string): Promise<string[]> {
  const text = await readFile(file, 'utf8');
  const info = ts.preProcessFile(text, true, true);
  return info.importedFiles
    .map((f) => f.fileName)
    .filter((name) => name.startsWith('.'))
    .map((name) => resolve(dirname(file), name))
    .filter((path) => path.startsWith(src + sep))
    .map((path) => relative(src, path));
}

/** The folder a file belongs to: its first directory under src/, or the file itself at the top. */
function folderOf(file: string): string {
  const parts = file.split(sep);
  return parts.length > 1 ? `${parts[0] ?? ''}/` : file;
}

/** Strongly connected components with more than one member, or with a self-edge (Tarjan). */
function cycles(graph: Graph): string[][] {
  let index = 0;
  const indices = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    indices.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indices.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) ?? 0, indices.get(w) ?? 0));
      }
    }
    if (low.get(v) !== indices.get(v)) return;
    const component: string[] = [];
    for (;;) {
      const w = stack.pop() as string;
      onStack.delete(w);
      component.push(w);
      if (w === v) break;
    }
    if (component.length > 1 || graph.get(v)?.has(v)) found.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!indices.has(v)) visit(v);
  return found;
}

/** One path around a component, to show which imports make the cycle. */
function witness(graph: Graph, component: readonly string[]): string {
  const members = new Set(component);
  const start = component[0] as string;
  const previous = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift() as string;
    for (const w of graph.get(v) ?? []) {
      if (!members.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let x = v; x !== start; x = previous.get(x) as string) path.splice(1, 0, x);
        return [...path, start].join(' → ');
      }
      if (!previous.has(w)) {
        previous.set(w, v);
        queue.push(w);
      }
    }
  }
  return component.join(', ');
}

function addEdge(graph: Graph, from: string, to: string): void {
  const edges = graph.get(from) ?? new Set<string>();
  edges.add(to);
  graph.set(from, edges);
}

async function main(): Promise<number> {
  const files: Graph = new Map();
  const folders: Graph = new Map();
  for (const path of await sourceFiles()) {
    const file = relative(src, path);
    files.set(file, files.get(file) ?? new Set());
    folders.set(folderOf(file), folders.get(folderOf(file)) ?? new Set());
    for (const target of await importsOf(path)) {
      addEdge(files, file, target);
      if (folderOf(target) !== folderOf(file)) addEdge(folders, folderOf(file), folderOf(target));
    }
  }
  const layering = [...folders].flatMap(([from, targets]) => {
    const rank = layerOf(from);
    if (rank === undefined) return [`src/${from} has no layer: add it to LAYERS in scripts/check-cycles.ts`];
    return [...targets].flatMap((to) => {
      const target = layerOf(to);
      return target !== undefined && target > rank
        ? [
            `layering: src/${from} imports src/${to}, of a later layer (${[...files].flatMap(([f, ts]) => (folderOf(f) === from ? [...ts].filter((t) => folderOf(t) === to).map((t) => `${f} → ${t}`) : [])).join(', ')})`,
          ]
        : [];
    });
  });
  const problems = [
    ...layering,
    ...cycles(files).map((c) => `file cycle among ${c.join(', ')}: ${witness(files, c)}`),
    ...cycles(folders).map((c) => `folder cycle among ${c.join(', ')}: ${witness(folders, c)}`),
  ];
  for (const p of problems) console.error(p);
  if (problems.length > 0) {
    console.error(`${problems.length} import problem(s) in src/ (see docs/decisions.md, "The core's shape")`);
    return 1;
  }
  return 0;
}

process.exitCode = await main();
