// docs/troubleshooting.md lists every reason gatehouse writes — condition reasons, Event
// reasons, check reasons, the admission policy's refusals — each with the file that
// writes it. This test keeps the page and the code in step, in both directions.
//
// The reasons are read from the source with the TypeScript parser, wherever the code
// states one: the reason argument of decide()'s condition() and event() helpers (and of
// repeatable(), whose argument becomes an Event's reason), every `reason:` property, and
// type aliases named *Reason. A reason is a CamelCase string literal; template strings and
// other text (why a Job was deleted, a CEL error) are messages, not reasons. A reason the
// code computes must be listed in DYNAMIC below with the values it can take, so that a new
// computed reason fails this test until someone documents it.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { NODE_ACTION_PHASES } from '../../src/api/node-action.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const DOC = join(ROOT, 'docs', 'troubleshooting.md');

/**
 * Not scanned: src/api holds the CRD schemas, whose `reason` keys are the API server's
 * field-error types of CEL rules (FieldValueRequired, ...), shown by kubectl as a field
 * error rather than a reason; src/cli and src/http (the HTTP API, /v1/health, the
 * dashboard) only read and show what the controller recorded.
 */
const NOT_SCANNED = ['src/api/', 'src/cli/', 'src/http/'];

/** Helpers whose argument at this index is a condition or Event reason. */
const REASON_ARGUMENT: Readonly<Record<string, number>> = {
  condition: 2, // condition(type, status, reason, message): src/actions/decision.ts
  event: 1, // event(type, reason, message): src/actions/decision.ts
  repeatable: 2, // repeatable(step, what, reason): the reason of its Event
};

/**
 * Reasons the code computes rather than states, as `file: expression`, with the values
 * they can take. Empty: the expression only passes on a reason stated (and extracted)
 * elsewhere, or carries free text.
 */
const DYNAMIC: Readonly<Record<string, readonly string[]>> = {
  // transition(): every phase change is an Event whose reason is the new phase.
  'src/actions/decision.ts: next': NODE_ACTION_PHASES,
  // PostHooksSucceeded while the boot hooks are not done: BootOutcome['state'] other than
  // Succeeded and Failed (src/boots/record.ts).
  'src/actions/phases/running-post-hooks.ts: outcome.state': ['Waiting', 'Running'],
  // A hook's LastRunSucceeded condition carries its finished run's phase.
  'src/hooks/status.ts: run.phase': ['Succeeded', 'Failed'],
  // The parameters of decide()'s condition(), event() and repeatable() helpers, whose
  // values are extracted at their call sites.
  'src/actions/decision.ts: reason': [],
  'src/actions/phases/executing.ts: reason': [],
  // The Cluster API mode's hold() and release() helpers take a MachineHeldReason (the
  // type alias, extracted); the stored condition's reason is read back, not written anew.
  'src/cluster-api/decide.ts: reason': [],
  // Why a rollout is halted: its node count, its failure budget, or the upgrade preflight.
  'src/rollouts/decide.ts: haltedBy': ['TooManyNodes', 'FailureBudgetExhausted', 'PreflightFailed'],
  'src/cluster-api/reconciler.ts: c.reason': [],
  // writtenState() reads back the reason an earlier controller wrote (one of CheckReason,
  // extracted where it is written); nothing new is written.
  'src/checks/state.ts: reason': [],
  // planSilences()'s event() helper, like decide()'s.
  'src/silences/plan.ts: reason': [],
  // The audit's one Event reason, a constant (src/boots/audit.ts).
  'src/boots/audit.ts: UNPLANNED_DISRUPTION_REASON': ['UnplannedDisruption'],
  // The gate signer's condition() method: the CertificateSigningRequest's reasons.
  'src/talos-gate/signer.ts: reason': ['GateRefused', 'RoleNotGranted', 'RoleGranted'],
  // Effects and EventSpecs passed on to the recorder.
  'src/actions/action-effects.ts: e.reason': [],
  'src/kube/events.ts: event.reason': [],
  // A check's reason is a CheckReason (the type alias in src/checks/state.ts, extracted).
  'src/checks/state.ts: outcome.reason': [],
  'src/checks/runner.ts: state.reason': [],
  'src/checks/runner.ts: slot.state.reason': [],
  // Free text: why a hook Job is deleted, what a CEL error is about.
  'src/hooks/plan.ts: reason': [],
  'src/hooks/runner.ts: reason': [],
  // A gate that halts a rollout: a canary node failed, or a soak's checks did not stay healthy.
  'src/rollouts/gates.ts: condition': ['CanaryFailed', 'SoakFailed'],
  // Free text: a promoter's words (status.promotions[].reason).
  'src/rollouts/gates.ts: promotion.reason': [],
  'src/rollouts/gates.ts: reason': [],
  // Free text: an approver's words (status.approval.decisions[].reason).
  'src/actions/phases/person-approval.ts: answer.reason': [],
  'src/actions/phases/person-approval.ts: reason': [],
  // Free text: why the undo of an ended action runs or not (status.undo.reason).
  'src/actions/phases/undo.ts: reason': [],
  'src/checks/cel.ts: message': [],
  // A checker Job container's termination reason, as the kubelet wrote it: free text.
  'src/checks/checker-job.ts: t.reason': [],
  // The rollout conditions' reasons, stated (and extracted) where the states are built.
  'src/rollouts/decide.ts: s.reason': [],
  // Events planned by decide(), whose reasons are stated there; here only logged.
  'src/rollouts/reconciler.ts: event.reason': [],
  // The notifier passes the reasons of the Events it sends on to receivers.
  'src/notifications/notifier.ts: event.reason': [],
  // A NotificationPolicy's Ready reason is a NotificationReadyReason (the type alias, extracted).
  'src/notifications/status.ts: r.ready.reason': [],
};

const CAMEL_CASE = /^[A-Z][A-Za-z]*$/;

interface CodeReasons {
  /** Reason → the files that state it. */
  reasons: Map<string, Set<string>>;
  /** Computed reasons found, as `file: expression`. */
  dynamic: Set<string>;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

function describeExpression(node: ts.Expression, file: ts.SourceFile): string {
  if (ts.isCallExpression(node)) return `${node.expression.getText(file)}(…)`;
  return node.getText(file).replace(/\s+/g, ' ');
}

function codeReasons(): CodeReasons {
  const reasons = new Map<string, Set<string>>();
  const dynamic = new Set<string>();
  const add = (reason: string, where: string) => {
    const files = reasons.get(reason) ?? new Set<string>();
    files.add(where);
    reasons.set(reason, files);
  };
  for (const path of sourceFiles(join(ROOT, 'src'))) {
    const where = relative(ROOT, path).split('\\').join('/');
    if (NOT_SCANNED.some((dir) => where.startsWith(dir))) continue;
    const file = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);

    /** The reasons an expression states; anything computed is recorded as dynamic. */
    const collect = (node: ts.Expression): void => {
      if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) {
        if (CAMEL_CASE.test(node.text)) add(node.text, where);
      } else if (ts.isTemplateExpression(node)) {
        // A message with values in it: free text.
      } else if (ts.isParenthesizedExpression(node)) {
        collect(node.expression);
      } else if (ts.isConditionalExpression(node)) {
        collect(node.whenTrue);
        collect(node.whenFalse);
      } else if (
        ts.isBinaryExpression(node) &&
        (node.operatorToken.kind === ts.SyntaxKind.QuestionQuestionToken ||
          node.operatorToken.kind === ts.SyntaxKind.BarBarToken)
      ) {
        collect(node.left);
        collect(node.right);
      } else {
        dynamic.add(`${where}: ${describeExpression(node, file)}`);
      }
    };

    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && ts.isIdentifier(node.expression)) {
        const index = REASON_ARGUMENT[node.expression.text];
        const argument = index === undefined ? undefined : node.arguments[index];
        if (argument) collect(argument);
      } else if (ts.isPropertyAssignment(node) && node.name.getText(file) === 'reason') {
        collect(node.initializer);
      } else if (ts.isShorthandPropertyAssignment(node) && node.name.text === 'reason') {
        dynamic.add(`${where}: reason`);
      } else if (ts.isTypeAliasDeclaration(node) && node.name.text.endsWith('Reason')) {
        const members = ts.isUnionTypeNode(node.type) ? node.type.types : [node.type];
        for (const member of members) {
          if (ts.isLiteralTypeNode(member) && ts.isStringLiteral(member.literal))
            add(member.literal.text, where);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  for (const expression of dynamic) {
    for (const reason of DYNAMIC[expression] ?? []) add(reason, expression.split(':')[0] ?? '');
  }
  return { reasons, dynamic };
}

interface DocRow {
  reason: string;
  /** The files the Source column names; undefined without one. */
  sources: string[] | undefined;
  line: number;
}

function cells(line: string): string[] {
  return line
    .trim()
    .replace(/^\|/, '')
    .replace(/\|$/, '')
    .split(/(?<!\\)\|/)
    .map((c) => c.trim());
}

/** The rows of every table of the page whose first column is headed "Reason". */
function documentedReasons(markdown: string): DocRow[] {
  const lines = markdown.split('\n');
  const rows: DocRow[] = [];
  for (let i = 0; i + 1 < lines.length; i++) {
    const header = lines[i] ?? '';
    const separator = lines[i + 1] ?? '';
    if (!header.trimStart().startsWith('|') || !/^\s*\|[\s:|-]+\|\s*$/.test(separator)) continue;
    const headings = cells(header).map((h) => h.toLowerCase());
    if (headings[0] !== 'reason') continue;
    const sourceColumn = headings.indexOf('source');
    for (let j = i + 2; j < lines.length && (lines[j] ?? '').trimStart().startsWith('|'); j++) {
      const row = cells(lines[j] ?? '');
      const match = /^`([A-Za-z]+)`$/.exec(row[0] ?? '');
      assert.ok(
        match,
        `docs/troubleshooting.md:${j + 1}: the Reason cell must be one \`Reason\`, not "${row[0] ?? ''}"`,
      );
      rows.push({
        reason: match[1] ?? '',
        sources:
          sourceColumn < 0
            ? undefined
            : [...(row[sourceColumn] ?? '').matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? ''),
        line: j + 1,
      });
    }
  }
  return rows;
}

describe('docs/troubleshooting.md and the reasons in the code', () => {
  const code = codeReasons();
  const rows = documentedReasons(readFileSync(DOC, 'utf8'));
  const documented = new Set(rows.map((r) => r.reason));

  it('finds the reasons in the code', () => {
    // A guard against an extraction that silently finds nothing.
    assert.ok(code.reasons.size >= 40, `only ${code.reasons.size} reasons found in src/`);
    for (const reason of [
      'PolicyWaiting',
      'ExecutorNotInstalled',
      'PrereadyHookFailed',
      'ProbeError',
      'Forbidden',
    ])
      assert.ok(code.reasons.has(reason), `${reason} not found in src/`);
  });

  it('knows what every computed reason can be', () => {
    const unknown = [...code.dynamic].filter((d) => !(d in DYNAMIC)).sort();
    assert.deepEqual(
      unknown,
      [],
      'reasons computed by the code that this test does not know: add them to DYNAMIC in test/unit/docs-troubleshooting.test.ts with the values they can take, and document those values',
    );
    const stale = Object.keys(DYNAMIC)
      .filter((d) => !code.dynamic.has(d))
      .sort();
    assert.deepEqual(stale, [], 'DYNAMIC lists expressions the code no longer has: remove them');
  });

  it('documents every reason the code writes', () => {
    const missing = [...code.reasons]
      .filter(([reason]) => !documented.has(reason))
      .map(([reason, files]) => `${reason} (${[...files].sort().join(', ')})`)
      .sort();
    assert.deepEqual(missing, [], 'reasons missing from the table at the end of docs/troubleshooting.md');
  });

  it('documents no reason the code does not write', () => {
    const unknown = rows
      .filter((r) => !code.reasons.has(r.reason))
      .map((r) => `docs/troubleshooting.md:${r.line}: ${r.reason}`);
    assert.deepEqual(unknown, [], 'reasons in docs/troubleshooting.md that no code writes');
  });

  it('names, for every reason, a file that states it', () => {
    assert.ok(rows.length > 0, 'no table headed "Reason" in docs/troubleshooting.md');
    const wrong: string[] = [];
    for (const row of rows) {
      const at = `docs/troubleshooting.md:${row.line}: ${row.reason}`;
      if (!row.sources?.length) {
        wrong.push(`${at}: no file in a Source column`);
        continue;
      }
      for (const source of row.sources) {
        const path = join(ROOT, source);
        if (!existsSync(path)) wrong.push(`${at}: ${source} does not exist`);
        else if (!readFileSync(path, 'utf8').includes(`'${row.reason}'`))
          wrong.push(`${at}: ${source} has no '${row.reason}'`);
      }
    }
    assert.deepEqual(wrong, []);
  });
});
