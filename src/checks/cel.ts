// CEL for checks: expressions over Kubernetes objects (`self`), decoded HTTP bodies
// (`body`) and the like, evaluated by @bufbuild/cel (a conformance-tested
// implementation). Each expression is parsed once and cached by its text; errors name
// the expression and, where the library knows it, the position in it.
//
// Values are JSON as the API server or a health endpoint sends it. Objects become CEL
// maps, so a missing field is an error unless tested with has(), as in Kubernetes'
// own CEL. Whole numbers become CEL ints (Kubernetes integer fields are int64, so
// `self.spec.replicas - 1` works as it does in a CRD validation rule); other numbers
// are doubles. CEL compares ints and doubles with each other, but does not mix them in
// arithmetic: `double(self.x) * 0.5`.
import { celEnv, isCelError, isCelList, isCelMap, parse, plan, unparse, type CelInput } from '@bufbuild/cel';
import { strings } from '@bufbuild/cel/ext';

type ParsedExpression = ReturnType<typeof parse>;
type Expr = ParsedExpression['expr'];

/** The strings extension (lowerAscii, split, join, ...) as Kubernetes' CEL has it. */
const environment = celEnv({ funcs: strings });

/** Identifiers that name CEL types rather than variables, e.g. `type(x) == string`. */
const TYPE_NAMES = new Set([
  'bool',
  'bytes',
  'double',
  'duration',
  'dyn',
  'int',
  'list',
  'map',
  'null_type',
  'string',
  'timestamp',
  'type',
  'uint',
]);

export interface SourcePosition {
  /** 1-based. */
  line: number;
  /** 1-based, in characters. */
  column: number;
}

/** A CEL expression that does not compile, or an evaluation that failed. */
export class CelExpressionError extends Error {
  override readonly name = 'CelExpressionError';
  readonly expression: string;
  /** `compile`: the expression itself is wrong; `evaluate`: it failed on this input. */
  readonly phase: 'compile' | 'evaluate';
  /** What went wrong, without the expression and position. */
  readonly reason: string;
  readonly position: SourcePosition | undefined;

  constructor(
    expression: string,
    phase: 'compile' | 'evaluate',
    reason: string,
    position: SourcePosition | undefined,
  ) {
    const where =
      position === undefined
        ? ''
        : expression.includes('\n')
          ? ` at line ${position.line}, column ${position.column}`
          : ` at column ${position.column}`;
    super(`CEL error in \`${expression}\`${where}: ${reason}`);
    this.expression = expression;
    this.phase = phase;
    this.reason = reason;
    this.position = position;
  }
}

/** A field the expression reads from one of its variables, e.g. self.status.ceph.health. */
export interface FieldReference {
  variable: string;
  path: readonly (string | number)[];
  /** As CEL spells it: `self.status.ceph.health`, `self.metadata.labels['app.kubernetes.io/name']`. */
  text: string;
}

/** What a referenced field holds in some input: for messages that quote what was found. */
export interface FieldValue {
  reference: FieldReference;
  present: boolean;
  value: unknown;
}

type Evaluate = ReturnType<typeof plan>;

/** A compiled expression; evaluate it as often as needed. */
export class CelProgram {
  readonly expression: string;
  /** The variables the expression reads (free identifiers), in order of appearance. */
  readonly variables: readonly string[];
  /** The fields the expression reads (or tests with has()) from its variables. */
  readonly references: readonly FieldReference[];
  private readonly run: Evaluate;
  private readonly parsed: ParsedExpression;
  private readonly analysis: Analysis;

  constructor(expression: string, parsed: ParsedExpression, run: Evaluate, analysis: Analysis) {
    this.expression = expression;
    this.parsed = parsed;
    this.run = run;
    this.analysis = analysis;
    this.variables = analysis.variables.map((v) => v.name);
    this.references = analysis.references;
  }

  /** Throws a compile-phase CelExpressionError if the expression reads a variable not in `available`. */
  requireVariables(available: readonly string[]): void {
    const unknown = this.analysis.variables.find((v) => !available.includes(v.name));
    if (!unknown) return;
    const offer = available.length ? `; it can use ${available.join(', ')}` : '';
    throw new CelExpressionError(
      this.expression,
      'compile',
      `unknown variable '${unknown.name}'${offer}`,
      unknown.position,
    );
  }

  /**
   * Evaluates the expression over JSON-shaped variables and returns its boolean result.
   * Throws a CelExpressionError (phase `evaluate`) when evaluation fails (a missing
   * field, a type mismatch) or the result is not a boolean.
   */
  evaluate(bindings: Readonly<Record<string, unknown>>): boolean {
    const result = this.value(bindings);
    if (typeof result !== 'boolean') {
      throw new CelExpressionError(
        this.expression,
        'evaluate',
        `the expression must give a boolean (true when healthy), but it gave ${describeCelValue(result)}`,
        undefined,
      );
    }
    return result;
  }

  /**
   * Evaluates an expression that may say what it found: `true` when healthy, `false` or a
   * message (a string) when not, or a list of messages (the findings; healthy when empty).
   * Throws like `evaluate` for a failure or any other result.
   */
  evaluateVerdict(bindings: Readonly<Record<string, unknown>>): boolean | string | string[] {
    const result = this.value(bindings);
    if (typeof result === 'boolean' || typeof result === 'string') return result;
    if (isCelList(result)) {
      const findings = [...result];
      if (findings.every((f) => typeof f === 'string')) return findings;
    }
    throw new CelExpressionError(
      this.expression,
      'evaluate',
      `the expression must give true (healthy), false or a message saying what is wrong, or a list of such messages (empty when healthy), but it gave ${describeCelValue(result)}`,
      undefined,
    );
  }

  private value(bindings: Readonly<Record<string, unknown>>): unknown {
    const result = this.run(this.input(bindings));
    if (isCelError(result)) {
      const { reason, at } = this.explainError(result.message, result.exprId);
      throw new CelExpressionError(
        this.expression,
        'evaluate',
        reason,
        at === undefined ? undefined : this.positionOf(at),
      );
    }
    return result;
  }

  /** The values the referenced fields hold in `bindings`, to say what an expression saw. */
  fieldValues(bindings: Readonly<Record<string, unknown>>): FieldValue[] {
    return this.references.map((reference) => valueAt(reference, bindings));
  }

  /**
   * The fields behind a false result: for `a && b && c`, only those read by the parts
   * that are not true; for any other expression, every field it reads.
   */
  explainFalse(bindings: Readonly<Record<string, unknown>>): FieldValue[] {
    const { conjuncts } = this.analysis;
    let references = this.references;
    if (conjuncts.length > 1) {
      const input = this.input(bindings);
      const failing = conjuncts.filter((c) => c.run(input) !== true).flatMap((c) => c.references);
      if (failing.length) references = [...new Map(failing.map((r) => [r.text, r])).values()];
    }
    return references.map((reference) => valueAt(reference, bindings));
  }

  private input(bindings: Readonly<Record<string, unknown>>): Record<string, CelInput> {
    const input: Record<string, CelInput> = {};
    for (const name of this.variables) input[name] = toCel(bindings[name]);
    return input;
  }

  private positionOf(id: bigint): SourcePosition | undefined {
    const offset = this.parsed.sourceInfo?.positions[id.toString()];
    return offset === undefined ? undefined : positionAt(this.expression, offset);
  }

  /**
   * The library says "field not found: x" and may point at the variable rather than
   * the access; find the access, say which object lacks the field and how to test for it.
   */
  private explainError(message: string, id: bigint | undefined): { reason: string; at: bigint | undefined } {
    const missing = /^field not found: (.*)$/s.exec(message)?.[1];
    const node = missing === undefined ? undefined : this.accessOf(missing, id);
    if (!node) return { reason: message, at: id };
    const kind = node.exprKind;
    if (kind.case === 'selectExpr' && kind.value.operand) {
      const operand = unparse(kind.value.operand);
      return {
        reason: `no field '${kind.value.field}' in ${operand} (test for it with has(${unparse(node)}))`,
        at: node.id,
      };
    }
    if (kind.case === 'callExpr') {
      const [operand, key] = kind.value.args;
      if (operand && key) {
        const [o, k] = [unparse(operand), unparse(key)];
        return { reason: `no key ${k} in ${o} (test for it with ${k} in ${o})`, at: node.id };
      }
    }
    return { reason: message, at: id };
  }

  /** The field access or constant index of `name`, preferring the one rooted at node `id`. */
  private accessOf(name: string, id: bigint | undefined): Expr | undefined {
    const nodes = this.analysis.nodes;
    const direct = id === undefined ? undefined : nodes.get(id);
    if (direct && accessedName(direct) === name) return direct;
    let fallback: Expr | undefined;
    for (const node of nodes.values()) {
      if (accessedName(node) !== name) continue;
      if (id !== undefined && rootOf(node).id === id) return node;
      fallback ??= node;
    }
    return fallback;
  }
}

/** The field a select reads, or the constant string key an index reads. */
function accessedName(node: Expr): string | undefined {
  const kind = node.exprKind;
  if (kind.case === 'selectExpr' && !kind.value.testOnly) return kind.value.field;
  if (kind.case === 'callExpr' && kind.value.function === '_[_]') {
    const key = kind.value.args[1]?.exprKind;
    if (key?.case === 'constExpr' && key.value.constantKind.case === 'stringValue')
      return key.value.constantKind.value;
  }
  return undefined;
}

/** The innermost operand of a chain of field accesses and indexes. */
function rootOf(node: Expr): Expr {
  const kind = node.exprKind;
  if (kind.case === 'selectExpr' && kind.value.operand) return rootOf(kind.value.operand);
  if (kind.case === 'callExpr' && kind.value.function === '_[_]' && kind.value.args[0])
    return rootOf(kind.value.args[0]);
  return node;
}

export interface CelEngineOptions {
  /** How many compiled expressions to keep; the least recently used go first. */
  cacheSize?: number;
}

/** Compiles CEL expressions once and keeps them, bounded, by their text. */
export class CelEngine {
  private readonly cacheSize: number;
  private readonly cache = new Map<string, CelProgram | CelExpressionError>();

  constructor({ cacheSize = 1000 }: CelEngineOptions = {}) {
    if (!Number.isInteger(cacheSize) || cacheSize < 1)
      throw new RangeError('cacheSize must be a whole number ≥ 1');
    this.cacheSize = cacheSize;
  }

  /** How many expressions are cached now. */
  get size(): number {
    return this.cache.size;
  }

  /**
   * The compiled program for `expression`, which may read only `variables`. Throws a
   * CelExpressionError (phase `compile`) for a syntax error, an unknown function or a
   * variable the caller does not bind.
   */
  compile(expression: string, variables: readonly string[]): CelProgram {
    let entry = this.cache.get(expression);
    if (entry === undefined) {
      entry = compileUncached(expression);
      if (this.cache.size >= this.cacheSize) {
        const oldest = this.cache.keys().next();
        if (!oldest.done) this.cache.delete(oldest.value);
      }
    } else {
      this.cache.delete(expression); // re-inserted below: most recently used
    }
    this.cache.set(expression, entry);
    if (entry instanceof CelExpressionError) throw entry;
    entry.requireVariables(variables);
    return entry;
  }

  /** Compiles (or reuses) `expression` and evaluates it over `bindings`. */
  evaluate(expression: string, bindings: Readonly<Record<string, unknown>>): boolean {
    return this.compile(expression, Object.keys(bindings)).evaluate(bindings);
  }
}

/** The engine the probes share. */
export const celEngine = new CelEngine();

// --- compilation -------------------------------------------------------------------

interface Analysis {
  variables: { name: string; position: SourcePosition | undefined }[];
  references: FieldReference[];
  /** The parts of a top-level `a && b && ...`, each runnable on its own. */
  conjuncts: { run: Evaluate; references: FieldReference[] }[];
  nodes: Map<bigint, Expr>;
}

function compileUncached(expression: string): CelProgram | CelExpressionError {
  let parsed: ParsedExpression;
  try {
    parsed = parse(expression);
  } catch (error) {
    return syntaxError(expression, error);
  }
  const analysis = analyse(expression, parsed);
  if (analysis instanceof CelExpressionError) return analysis;
  let run: Evaluate;
  try {
    run = plan(environment, parsed);
    const parts = conjunctsOf(parsed.expr);
    if (parts.length > 1)
      analysis.conjuncts = parts.map((part) => ({
        run: plan(environment, part),
        references: referencesIn(part),
      }));
  } catch (error) {
    return new CelExpressionError(
      expression,
      'compile',
      error instanceof Error ? error.message : String(error),
      undefined,
    );
  }
  return new CelProgram(expression, parsed, run, analysis);
}

function syntaxError(expression: string, error: unknown): CelExpressionError {
  const e = error as { rawMessage?: unknown; message?: unknown; location?: { start?: SourcePosition } };
  const start = e.location?.start;
  const reason =
    typeof e.rawMessage === 'string'
      ? e.rawMessage
      : typeof e.message === 'string'
        ? e.message.replace(/^<input>:\d+:\d+: /, '')
        : String(error);
  return new CelExpressionError(
    expression,
    'compile',
    `syntax error: ${reason}`,
    start ? { line: start.line, column: start.column } : undefined,
  );
}

/**
 * Walks the syntax tree once: which variables it reads (free identifiers, with
 * comprehension variables in scope), which fields of them, and that every function it
 * calls exists, so a typo fails at compile time instead of on every evaluation.
 */
function analyse(expression: string, parsed: ParsedExpression): Analysis | CelExpressionError {
  const analysis: Analysis = {
    variables: [],
    references: referencesIn(parsed.expr),
    conjuncts: [],
    nodes: new Map(),
  };
  const position = (node: Expr) => {
    const offset = parsed.sourceInfo?.positions[node.id.toString()];
    return offset === undefined ? undefined : positionAt(expression, offset);
  };
  let failure: CelExpressionError | undefined;

  const visit = (node: Expr, scope: ReadonlySet<string>): void => {
    if (failure) return;
    analysis.nodes.set(node.id, node);
    const kind = node.exprKind;
    if (kind.case === 'identExpr') {
      const name = kind.value.name;
      if (!scope.has(name) && !TYPE_NAMES.has(name) && !analysis.variables.some((v) => v.name === name))
        analysis.variables.push({ name, position: position(node) });
    } else if (kind.case === 'callExpr') {
      const name = kind.value.function;
      // Operators (_&&_, _[_], @in, ...) are not looked up by name.
      if (/^[A-Za-z][A-Za-z0-9_]*$/.test(name) && !environment.funcs.find(name)) {
        failure = new CelExpressionError(expression, 'compile', `unknown function '${name}'`, position(node));
        return;
      }
    }
    for (const [next, nextScope] of children(node, scope)) visit(next, nextScope);
  };
  visit(parsed.expr, new Set());
  return failure ?? analysis;
}

/** The fields an expression reads from its variables (not from comprehension variables). */
function referencesIn(root: Expr): FieldReference[] {
  const found = new Map<string, FieldReference>();
  const visit = (node: Expr, scope: ReadonlySet<string>): void => {
    const chain = fieldChain(node);
    if (chain && chain.path.length > 0 && !scope.has(chain.variable) && !TYPE_NAMES.has(chain.variable)) {
      if (!found.has(chain.text)) found.set(chain.text, chain);
      return; // self.a.b, not also self.a
    }
    for (const [next, nextScope] of children(node, scope)) visit(next, nextScope);
  };
  visit(root, new Set());
  return [...found.values()];
}

/** The sub-expressions of a node, each with the names a comprehension binds there. */
function* children(node: Expr, scope: ReadonlySet<string>): Generator<[Expr, ReadonlySet<string>]> {
  const kind = node.exprKind;
  switch (kind.case) {
    case 'selectExpr':
      if (kind.value.operand) yield [kind.value.operand, scope];
      return;
    case 'callExpr':
      if (kind.value.target) yield [kind.value.target, scope];
      for (const arg of kind.value.args) yield [arg, scope];
      return;
    case 'listExpr':
      for (const element of kind.value.elements) yield [element, scope];
      return;
    case 'structExpr':
      for (const entry of kind.value.entries) {
        if (entry.keyKind.case === 'mapKey') yield [entry.keyKind.value, scope];
        if (entry.value) yield [entry.value, scope];
      }
      return;
    case 'comprehensionExpr': {
      const c = kind.value;
      if (c.iterRange) yield [c.iterRange, scope];
      if (c.accuInit) yield [c.accuInit, scope];
      const inner = new Set([...scope, c.iterVar, c.iterVar2, c.accuVar].filter(Boolean));
      for (const part of [c.loopCondition, c.loopStep, c.result]) if (part) yield [part, inner];
      return;
    }
    default:
      return;
  }
}

/** `a && b && c` as [a, b, c]; anything else as itself. */
function conjunctsOf(node: Expr): Expr[] {
  const kind = node.exprKind;
  if (kind.case === 'callExpr' && kind.value.function === '_&&_' && !kind.value.target)
    return kind.value.args.flatMap(conjunctsOf);
  return [node];
}

/** `self.a.b['c']` as a variable and a path, when the node is such a plain field access. */
function fieldChain(node: Expr): FieldReference | undefined {
  const kind = node.exprKind;
  if (kind.case === 'identExpr') return { variable: kind.value.name, path: [], text: kind.value.name };
  // has(self.a.b) reads self.a.b too, as far as a message is concerned.
  if (kind.case === 'selectExpr' && kind.value.operand) {
    const base = fieldChain(kind.value.operand);
    const field = kind.value.field;
    return base && { variable: base.variable, path: [...base.path, field], text: `${base.text}.${field}` };
  }
  if (kind.case === 'callExpr' && kind.value.function === '_[_]' && !kind.value.target) {
    const [operand, key] = kind.value.args;
    const constant = key?.exprKind.case === 'constExpr' ? key.exprKind.value.constantKind : undefined;
    const base = operand && fieldChain(operand);
    if (!base || !constant) return undefined;
    if (constant.case === 'stringValue')
      return {
        variable: base.variable,
        path: [...base.path, constant.value],
        text: `${base.text}[${quote(constant.value)}]`,
      };
    if (constant.case === 'int64Value')
      return {
        variable: base.variable,
        path: [...base.path, Number(constant.value)],
        text: `${base.text}[${constant.value.toString()}]`,
      };
  }
  return undefined;
}

function positionAt(text: string, offset: number): SourcePosition {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf('\n') + 1;
  return { line: before.split('\n').length, column: offset - lineStart + 1 };
}

// --- values ------------------------------------------------------------------------

/** JSON as CEL sees it: objects as maps, whole numbers as ints. */
function toCel(value: unknown): CelInput {
  switch (typeof value) {
    case 'string':
    case 'boolean':
    case 'bigint':
      return value;
    case 'number':
      return Number.isSafeInteger(value) ? BigInt(value) : value;
    case 'undefined':
      return null;
    case 'object': {
      if (value === null) return null;
      if (Array.isArray(value)) return value.map(toCel);
      const map = new Map<string, CelInput>();
      for (const [k, v] of Object.entries(value)) map.set(k, toCel(v));
      return map;
    }
    default:
      throw new TypeError(`cannot give CEL a ${typeof value}`);
  }
}

function valueAt(reference: FieldReference, bindings: Readonly<Record<string, unknown>>): FieldValue {
  let value: unknown = bindings[reference.variable];
  for (const step of reference.path) {
    const next = child(value, step);
    if (!next.present) return { reference, present: false, value: undefined };
    value = next.value;
  }
  return { reference, present: true, value };
}

function child(value: unknown, step: string | number): { present: boolean; value: unknown } {
  if (typeof step === 'number')
    return Array.isArray(value) && step >= 0 && step < value.length
      ? { present: true, value: value[step] as unknown }
      : { present: false, value: undefined };
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, step))
    return { present: true, value: (value as Record<string, unknown>)[step] };
  return { present: false, value: undefined };
}

/** A CEL string literal. */
function quote(text: string): string {
  return `'${text.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n')}'`;
}

/** A JSON value written the way CEL would (strings single-quoted), shortened for a message. */
export function formatJsonValue(value: unknown, maxLength = 120): string {
  let text: string;
  if (typeof value === 'string') text = quote(value);
  else if (value === undefined) text = 'undefined';
  else text = JSON.stringify(value);
  return text.length > maxLength ? `${text.slice(0, maxLength - 1)}…` : text;
}

/** "self.status.ceph.health == 'HEALTH_WARN'" or "no self.status.ceph", for messages. */
export function formatFieldValue({ reference, present, value }: FieldValue): string {
  return present ? `${reference.text} == ${formatJsonValue(value)}` : `no ${reference.text}`;
}

function describeCelValue(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'bigint') return `int ${value.toString()}`;
  if (typeof value === 'number') return `double ${String(value)}`;
  if (typeof value === 'string') return `string ${formatJsonValue(value)}`;
  if (isCelList(value)) return `a list of ${value.size} elements`;
  if (isCelMap(value)) return `a map of ${value.size} entries`;
  return 'a value of another type';
}
