// @ts-check
// The dashboard page: follows /v1/dashboard/events and keeps the tables in step with
// each snapshot. Rows are patched in place, keyed by name, so an update never takes
// the keyboard focus or an open timeline away from the reader. Text only ever goes
// in through textContent and attributes (the CSP forbids HTML string sinks anyway).
/* global document, window, EventSource, URL, CSS, HTMLElement, SVGElement, Element, KeyboardEvent */

// What the server sends: the view model of src/http/dashboard-view.ts. `npm run check`
// type-checks this script against it (src/http/dashboard/tsconfig.json), so the page
// and the server cannot drift apart.
/**
 * @typedef {import('../dashboard-view.ts').DashboardView} DashboardView
 * @typedef {import('../dashboard-view.ts').CheckRow} CheckRow
 * @typedef {import('../dashboard-view.ts').PolicyRow} PolicyRow
 * @typedef {import('../dashboard-view.ts').ActionRow} ActionRow
 * @typedef {import('../dashboard-view.ts').HookRunRow} HookRunRow
 * @typedef {import('../dashboard-view.ts').NodeRow} NodeRow
 * @typedef {import('../rollout-view.ts').RolloutView} RolloutView
 * @typedef {import('../rollout-view.ts').RolloutTile} RolloutTile
 * @typedef {import('../rollout-view.ts').RolloutLane} RolloutLane
 * @typedef {import('../rollout-view.ts').PhaseSegment} PhaseSegment
 * @typedef {import('../rollout-view.ts').TileState} TileState
 */

/** @type {Record<CheckRow['state'], string>} */
const STATE_SYMBOLS = { Healthy: '✓', Unhealthy: '✗', Unknown: '?' };
/** @type {Record<import('../dashboard-view.ts').StepState, [string, string]>} */
const STEP_WORDS = {
  done: ['✓', 'done'],
  current: ['▶', 'in progress'],
  skipped: ['–', 'skipped'],
  upcoming: ['○', 'not yet'],
  notReached: ['○', 'not reached'],
  ended: ['✗', 'ended'],
};
/** @type {Partial<Record<ActionRow['phase'], string>>} */
const PHASE_SYMBOLS = { Succeeded: '✓', Failed: '✗', Denied: '✗', Cancelled: '✗' };
/** @type {Record<HookRunRow['phase'], string>} */
const HOOK_SYMBOLS = { Succeeded: '✓', Failed: '✗', Running: '▶', Pending: '○', Bypassed: '–' };
const RECONNECT_MS = 5000;
const CHANGES_KEPT = 20;

/** Timelines the reader opened, by action name: kept open across updates. */
/** @type {Set<string>} */
const expanded = new Set();
/**
 * Rendered rows by section and key, with the data they were rendered from.
 * @type {Map<string, Map<string, { element: HTMLElement, data: string, notice: string }>>}
 */
const rendered = new Map();
/** @type {DashboardView | undefined} */
let previous;

/**
 * An element the page must have (index.html): its absence is a bug worth an error.
 * @param {string} id
 */
function byId(id) {
  const element = document.getElementById(id);
  if (!element) throw new Error(`the dashboard page has no element #${id}`);
  return element;
}

// ---------------------------------------------------------------------------------
// Building DOM without HTML strings.

/**
 * @typedef {Node | string | null | undefined | false} Child
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined> | null} [attributes]
 * @param {...(Child | Child[])} children
 * @returns {HTMLElement}
 */
function h(tag, attributes, ...children) {
  return fill(document.createElement(tag), attributes, children);
}

/**
 * Sets the attributes (`text` is the text content; false, null and undefined leave one
 * out) and appends the children of an element `h` or `svg` made.
 * @template {Element} E
 * @param {E} element
 * @param {Record<string, string | number | boolean | null | undefined> | null | undefined} attributes
 * @param {(Child | Child[])[]} children
 * @returns {E}
 */
function fill(element, attributes, children) {
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'text') element.textContent = String(value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(typeof child === 'string' ? document.createTextNode(child) : child);
  }
  return element;
}

/** @param {string} iso */
function formatTime(iso) {
  const date = new Date(iso);
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString(undefined, { hour12: false })
    : date.toLocaleString(undefined, { hour12: false });
}

/** @param {string | null | undefined} iso */
function time(iso, fallback = '—') {
  if (!iso) return h('span', { class: 'muted', text: fallback });
  return h('time', { datetime: iso, title: iso, text: formatTime(iso) });
}

/**
 * A state as a symbol (decoration, hidden from screen readers) and a word (always shown).
 * @param {string} kind
 * @param {string} state
 * @param {string} symbol
 */
function badge(kind, state, symbol, word = state) {
  return h(
    'span',
    { class: `badge ${kind}`, 'data-state': state },
    h('span', { class: 'symbol', 'aria-hidden': 'true', text: symbol }),
    ` ${word}`,
  );
}

/**
 * @param {string[]} list
 * @param {number} total
 * @param {string} noun
 */
function names(list, total, noun) {
  if (total === 0) return `no ${noun}s`;
  const more = total > list.length ? ` and ${String(total - list.length)} more` : '';
  return `${String(total)} ${noun}${total === 1 ? '' : 's'} (${list.join(', ')}${more})`;
}

// ---------------------------------------------------------------------------------
// Rows.

/** @param {CheckRow} check */
function checkRow(check) {
  const gates = check.gates;
  const actions = gates.allActions ? 'every action' : gates.actions.join(', ');
  const nodes = gates.nodeSelector
    ? `${names(gates.nodes, gates.nodeCount, 'node')} matching ${gates.nodeSelector}`
    : `every node (${String(gates.nodeCount)})`;
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: check.name }),
    h('td', {}, badge('check-state', check.state, STATE_SYMBOLS[check.state] ?? '?')),
    h('td', {}, time(check.lastProbeTime, 'not probed yet')),
    h(
      'td',
      {},
      h('div', { text: `${actions} on ${nodes}` }),
      check.gatedActions.length > 0 &&
        h('div', { class: 'muted', text: `now gating: ${check.gatedActions.join(', ')}` }),
    ),
    h(
      'td',
      { class: 'message' },
      check.nodeResults ? nodeResults(check.name, check.nodeResults) : check.message,
    ),
  );
}

/**
 * A Node-scoped check's results, one line per unsafe node: "worker-2: ok-to-stop: …".
 * @param {string} name
 * @param {NonNullable<CheckRow['nodeResults']>} results
 */
function nodeResults(name, results) {
  const more = results.unsafe - results.unsafeNodes.length;
  return h(
    'div',
    {},
    h('div', { text: `${String(results.safe)} of ${String(results.evaluated)} evaluated nodes safe` }),
    ...results.unsafeNodes.map((n) =>
      h('div', { class: 'unsafe-node', text: `${n.name}: ${name}: ${n.message}` }),
    ),
    more > 0 && h('div', { class: 'muted', text: `and ${String(more)} more unsafe nodes` }),
  );
}

/** @param {PolicyRow} policy */
function policyRow(policy) {
  const w = policy.window;
  let windowText;
  if (w.always) windowText = 'no windows: always open';
  else if (w.open) windowText = w.closesAt ? 'closes at ' : '';
  else windowText = w.nextStart ? 'next opens ' : 'no window will open';
  const windowState = w.open ? 'Open' : 'Closed';
  const full = policy.inUse >= policy.allowed;
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: policy.name }),
    h(
      'td',
      {},
      badge(
        'budget',
        full ? 'Full' : 'Free',
        full ? '■' : '□',
        `${String(policy.inUse)} of ${String(policy.allowed)} in use`,
      ),
      h('div', {
        class: 'muted',
        text: `maxConcurrent ${policy.maxConcurrent} over ${String(policy.governedNodes)} governed node${policy.governedNodes === 1 ? '' : 's'}`,
      }),
      policy.holders.length > 0 && h('div', { class: 'muted', text: `held by ${policy.holders.join(', ')}` }),
    ),
    h(
      'td',
      {},
      badge('window', windowState, w.open ? '◉' : '◌'),
      h(
        'div',
        { class: 'muted' },
        windowText,
        !w.always && w.open && w.closesAt ? time(w.closesAt) : null,
        !w.always && !w.open && w.nextStart ? time(w.nextStart) : null,
      ),
      w.windows.length > 0 && h('div', { class: 'muted', text: w.windows.join('; ') }),
      w.problems.map((p) => h('div', { class: 'problem', text: `problem: ${p}` })),
    ),
    h(
      'td',
      {},
      `${policy.allActions ? 'every action' : policy.actions.join(', ')} on ${
        policy.nodeSelector ? `nodes matching ${policy.nodeSelector}` : 'every node'
      }`,
    ),
  );
}

/**
 * One hook attempt. An undo run is recorded with failurePolicy Ignore (its failure
 * stops nothing: the action has ended), but it is reported as a Warning and a
 * condition, so "failures ignored" is said of hook runs only.
 * @param {HookRunRow} run
 * @param {boolean} [undo]
 */
function hookRunItem(run, undo = false) {
  const what = `${run.kind} ${run.namespace}/${run.name}, attempt ${String(run.attempt)}`;
  return h(
    'li',
    { class: 'hook-run' },
    badge('hook', run.phase, HOOK_SYMBOLS[run.phase] ?? '•'),
    ` ${what}`,
    run.failurePolicy === 'Ignore' && !undo ? ' (failures ignored)' : '',
    run.job ? h('span', { class: 'muted', text: ` — Job ${run.job}` }) : '',
    h(
      'div',
      { class: 'muted' },
      'started ',
      time(run.startTime, 'not yet'),
      ', finished ',
      time(run.completionTime, 'not yet'),
    ),
    run.message ? h('div', { class: 'message', text: run.message }) : '',
  );
}

/** @param {ActionRow} action */
function timeline(action) {
  return h(
    'ol',
    { class: 'timeline', 'aria-label': `Phases of ${action.name}` },
    action.timeline.map((step) => {
      const [symbol, word] = STEP_WORDS[step.state] ?? ['•', step.state];
      return h(
        'li',
        { class: 'step', 'data-state': step.state, 'aria-current': step.state === 'current' ? 'step' : null },
        h('span', { class: 'step-symbol', 'aria-hidden': 'true', text: symbol }),
        h('strong', { class: 'step-phase', text: step.phase }),
        h('span', { class: 'step-word', text: ` ${word}` }),
        step.time ? [' ', time(step.time)] : '',
        step.note ? h('div', { class: 'message', text: step.note }) : '',
        step.hooks.length > 0 &&
          h(
            'ul',
            { class: 'hook-runs', 'aria-label': `Hook runs in ${step.phase}` },
            step.hooks.map((run) => hookRunItem(run)),
          ),
      );
    }),
  );
}

/**
 * What holds the drain, or held it when the action ended: each pod refused and the
 * PodDisruptionBudget that refuses it, longest first.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['drain']>} drain
 */
function drainHold(action, drain) {
  return [
    h(
      'h4',
      {},
      action.finished ? 'What held the drain' : 'What holds the drain',
      h('span', { class: 'muted' }, ' — evictions refused since ', time(drain.since)),
    ),
    h(
      'ul',
      { class: 'drain-blockers', 'aria-label': `Evictions refused for ${action.name}` },
      drain.blockers.map((b) =>
        h(
          'li',
          { class: 'drain-blocker' },
          badge('blocker', 'Refused', '✗'),
          ` ${b.text}`,
          h('span', { class: 'muted' }, ' — since ', time(b.since)),
        ),
      ),
      drain.more > 0 ? h('li', { class: 'muted', text: `and ${String(drain.more)} more` }) : '',
    ),
  ];
}

/**
 * What a drain of the node would meet, forecast before approval: each Pod named, what is
 * wrong, and what the simulation covers.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['drainForecast']>} forecast
 */
function drainForecastPart(action, forecast) {
  return [
    h('h4', {}, 'Drain forecast', h('span', { class: 'muted' }, ' — made ', time(forecast.time))),
    h('div', { class: 'message', text: forecast.summary }),
    h(
      'ul',
      { class: 'drain-blockers', 'aria-label': `Drain forecast of ${action.name}` },
      forecast.pods.map((p) =>
        h(
          'li',
          { class: 'drain-blocker' },
          p.holds ? badge('forecast', 'Refused', '✗', 'Holds') : badge('forecast', 'Held', '–', 'Lost'),
          ` ${p.text}`,
        ),
      ),
      forecast.more > 0 ? h('li', { class: 'muted', text: `and ${String(forecast.more)} more` }) : '',
    ),
    h('p', { class: 'muted', text: forecast.scope }),
  ];
}

/**
 * How a configuration change disrupts its node, decided before approval: its class, how
 * it was decided, and the configuration paths that decided it.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['configDisruption']>} disruption
 */
function configDisruptionPart(action, disruption) {
  return [
    h('h4', {}, 'Disruption', h('span', { class: 'muted' }, ` — ${disruption.basis}`)),
    h(
      'div',
      { class: 'message', 'aria-label': `Disruption class of ${action.name}` },
      badge('disruption', disruption.class, disruption.class === 'None' ? '✓' : '–'),
      ` ${disruption.paths.join(', ')}`,
    ),
    h('p', { class: 'muted', text: disruption.message }),
  ];
}

/**
 * The undo of the pre-action hooks: why (not), and each run like a hook's.
 * @param {ActionRow} action
 * @param {NonNullable<ActionRow['undo']>} undo
 */
function undoPart(action, undo) {
  const parts = [
    h('h4', { text: 'Undo of the pre-action hooks' }),
    h('div', { class: 'message', text: undo.reason }),
  ];
  if (undo.runs.length > 0)
    parts.push(
      h(
        'ul',
        { class: 'hook-runs', 'aria-label': `Undo runs of ${action.name}` },
        undo.runs.map((run) => hookRunItem(run, true)),
      ),
    );
  return parts;
}

/** @param {ActionRow} action */
function actionDetails(action) {
  const parts = [h('h3', { text: `Timeline of ${action.name}` }), timeline(action)];
  if (action.drain) parts.push(...drainHold(action, action.drain));
  if (action.configDisruption) parts.push(...configDisruptionPart(action, action.configDisruption));
  if (action.drainForecast) parts.push(...drainForecastPart(action, action.drainForecast));
  if (action.undo) parts.push(...undoPart(action, action.undo));
  if (action.checks.length > 0) {
    parts.push(
      h('h4', { text: 'Checks it was judged on' }),
      h(
        'ul',
        { class: 'judged' },
        action.checks.map((c) => {
          const state = c.bypassed
            ? 'Bypassed'
            : c.notChecked
              ? 'NotChecked'
              : c.healthy
                ? 'Healthy'
                : 'Unhealthy';
          const symbol = c.bypassed || c.notChecked ? '–' : c.healthy ? '✓' : '✗';
          return h(
            'li',
            {},
            badge('check-state', state, symbol),
            ` ${c.name}`,
            c.probeTime ? [' at ', time(c.probeTime)] : '',
            c.message ? h('div', { class: 'message', text: c.message }) : '',
          );
        }),
      ),
    );
  }
  if (action.conditions.length > 0) {
    parts.push(
      h('h4', { text: 'Conditions' }),
      h(
        'ul',
        { class: 'conditions' },
        action.conditions.map((c) =>
          h(
            'li',
            {},
            h('strong', { text: c.type }),
            ` ${c.status} (${c.reason}) since `,
            time(c.time),
            c.message ? h('div', { class: 'message', text: c.message }) : '',
          ),
        ),
      ),
    );
  }
  const boots = [
    action.bootIDBefore && `boot ID before: ${action.bootIDBefore}`,
    action.bootIDAfter && `after: ${action.bootIDAfter}`,
  ].filter(Boolean);
  if (boots.length > 0) parts.push(h('p', { class: 'muted', text: boots.join(', ') }));
  return parts;
}

/** @param {ActionRow} action */
function actionBody(action) {
  const detailsId = `timeline-${action.name}`;
  const open = expanded.has(action.name);
  const bypass = action.bypass
    ? `${[action.bypass.healthChecks && 'health checks', action.bypass.hooks && 'hooks'].filter(Boolean).join(' and ')}: ${action.bypass.reason}`
    : 'none';
  const phaseWord = action.cancelling ? `${action.phase} (cancelling)` : action.phase;
  return h(
    'tbody',
    { class: 'action', 'data-finished': action.finished },
    h(
      'tr',
      {},
      h(
        'th',
        { scope: 'row' },
        h('div', { text: action.name }),
        h('div', {
          class: 'muted',
          text: [action.action, action.target, action.execution].filter(Boolean).join(' · '),
        }),
      ),
      h('td', { text: action.node }),
      h(
        'td',
        {},
        badge('phase', action.phase, PHASE_SYMBOLS[action.phase] ?? (action.finished ? '•' : '▶'), phaseWord),
        h(
          'div',
          { class: 'muted' },
          'since ',
          time(action.completionTime ?? action.phaseTime ?? action.requestedAt),
        ),
        h('div', { class: 'message', text: action.message }),
      ),
      h('td', { text: action.requestedBy }),
      h(
        'td',
        { class: action.bypass ? 'bypass' : 'muted' },
        action.bypass ? badge('bypass', 'Bypass', '!', bypass) : bypass,
      ),
      h(
        'td',
        {},
        h(
          'button',
          {
            type: 'button',
            class: 'disclosure',
            'aria-expanded': open ? 'true' : 'false',
            'aria-controls': detailsId,
            'data-toggle': action.name,
            'data-focus-key': `toggle:${action.name}`,
          },
          h('span', { class: 'disclosure-symbol', 'aria-hidden': 'true', text: open ? '▾' : '▸' }),
          ' Timeline',
          h('span', { class: 'visually-hidden', text: ` of ${action.name}` }),
        ),
      ),
    ),
    h(
      'tr',
      { class: 'details', id: detailsId, hidden: !open },
      h('td', { colspan: '6' }, actionDetails(action)),
    ),
  );
}

/** @param {NodeRow} node */
function nodeRow(node) {
  const ready = node.exists ? node.ready : 'Gone';
  const readyWord = { True: 'Ready', False: 'Not ready', Unknown: 'Unknown', Gone: 'Deleted' }[ready];
  return h(
    'tr',
    {},
    h('th', { scope: 'row', text: node.name }),
    h(
      'td',
      {},
      badge('node-ready', ready, ready === 'True' ? '✓' : ready === 'False' ? '✗' : '?', readyWord),
      node.unschedulable ? h('div', { class: 'muted', text: 'cordoned' }) : '',
      node.unplanned
        ? h(
            'div',
            {
              title:
                'the unplanned-disruption audit: no gatehouse action explains it (Event UnplannedDisruption on the Node)',
            },
            badge(
              'unplanned',
              node.unplanned.kind,
              '⚠',
              `unplanned ${node.unplanned.kind} at ${formatTime(node.unplanned.at)}`,
            ),
          )
        : '',
    ),
    h('td', {}, node.preready ? badge('preready', 'Held', '⏸', 'yes: preready taint') : 'no'),
    h('td', { text: node.actions.length > 0 ? node.actions.join(', ') : '—' }),
  );
}

// ---------------------------------------------------------------------------------
// Rollouts: plain SVG drawn here. Every state has a pattern and a word besides its
// colour, every tile and segment says what it is (aria-label and title), and the tiles
// of a map are one keyboard stop, the arrow keys moving between them.

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Each tile state's pattern and symbol (its word is the view model's).
 * @type {Record<TileState, [string, string]>}
 */
const TILE_STYLE = {
  done: ['pat-none', '✓'],
  skipped: ['pat-horizontal', '–'],
  running: ['pat-stripes', '▶'],
  waiting: ['pat-dots', '‖'],
  failed: ['pat-cross', '✗'],
  notYet: ['pat-none', '○'],
  vanished: ['pat-grid', '?'],
  quarantined: ['pat-back-stripes', '⊘'],
};

/**
 * Each phase's pattern, and the short word drawn in a segment too narrow for its label.
 * @type {Partial<Record<PhaseSegment['phase'], [string, string]>>}
 */
const PHASE_STYLE = {
  Pending: ['pat-dots', 'wait'],
  WaitingForHealth: ['pat-horizontal', 'health'],
  RunningPreHooks: ['pat-stripes', 'pre'],
  Approved: ['pat-none', 'ok'],
  Executing: ['pat-cross', 'exec'],
  WaitingForNode: ['pat-vertical', 'node'],
  Held: ['pat-grid', 'held'],
  RunningPostHooks: ['pat-back-stripes', 'post'],
};

/** @type {[PhaseSegment['phase'], string][]} */
const LEGEND_PHASES = [
  ['Pending', 'waiting for policies'],
  ['WaitingForHealth', 'waiting for health'],
  ['RunningPreHooks', 'pre-hooks'],
  ['Approved', 'approved'],
  ['Executing', 'executing'],
  ['WaitingForNode', 'waiting for node'],
  ['RunningPostHooks', 'post-hooks'],
];

/** The node each map's keyboard stop is on, by rollout: kept across updates. */
/** @type {Map<string, string>} */
const mapFocus = new Map();

/**
 * An SVG element, like h() for HTML.
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined> | null} [attributes]
 * @param {...(Child | Child[])} children
 * @returns {SVGElement}
 */
function svg(tag, attributes, ...children) {
  return fill(/** @type {SVGElement} */ (document.createElementNS(SVG_NS, tag)), attributes, children);
}

/** @param {string} text */
function title(text) {
  return svg('title', { text });
}

/**
 * Roughly how wide a text of the drawings' font is (no layout pass needed).
 * @param {string} text
 */
function textWidth(text, size = 12) {
  return text.length * size * 0.58;
}

/**
 * A rectangle in a state's colour (class) with its pattern over it.
 * @param {Record<string, number>} box
 * @param {string} pattern
 */
function filled(box, pattern) {
  return [
    svg('rect', { ...box, class: 'fill' }),
    svg('rect', { ...box, class: 'pattern', fill: `url(#${pattern})` }),
  ];
}

const TILE = { width: 150, height: 46, gap: 8 };
const MAP_WIDTH = 1100;

/**
 * The node map: one tile per node, by group, each a word and a symbol besides its colour.
 * @param {RolloutView} rollout
 */
function nodeMap(rollout) {
  const perRow = Math.max(1, Math.floor((MAP_WIDTH + TILE.gap) / (TILE.width + TILE.gap)));
  const nodes = rollout.groups.flatMap((g) => g.tiles.map((t) => t.node));
  const stop = mapFocus.get(rollout.name);
  const focused = stop !== undefined && nodes.includes(stop) ? stop : nodes[0];
  let y = 0;
  const groups = rollout.groups.map((group) => {
    const top = y;
    const rows = Math.ceil(group.tiles.length / perRow);
    y += 22 + rows * (TILE.height + TILE.gap);
    return svg(
      'g',
      { role: 'group', 'aria-label': `${group.label}: ${String(group.tiles.length)} nodes` },
      svg('text', { x: 0, y: top + 15, class: 'group-label', text: group.label }),
      group.tiles.map((t, i) => {
        const x = (i % perRow) * (TILE.width + TILE.gap);
        const ty = top + 22 + Math.floor(i / perRow) * (TILE.height + TILE.gap);
        const [pattern, symbol] = TILE_STYLE[t.state] ?? ['pat-none', '•'];
        const label = `${t.node}: ${t.word}${t.controlPlane ? ' (control plane)' : ''}`;
        const name = t.node.length > 20 ? `${t.node.slice(0, 19)}…` : t.node;
        const word = t.word.length > 20 ? `${t.word.slice(0, 19)}…` : t.word;
        return svg(
          'g',
          {
            class: 'tile',
            'data-state': t.state,
            'data-tile': t.node,
            'data-focus-key': `tile:${rollout.name}:${t.node}`,
            role: 'img',
            'aria-label': label,
            tabindex: t.node === focused ? '0' : '-1',
            transform: `translate(${String(x)} ${String(ty)})`,
          },
          title(t.message ? `${label} — ${t.message}` : label),
          filled({ x: 0, y: 0, width: TILE.width, height: TILE.height, rx: 4 }, pattern),
          svg('rect', { x: 0, y: 0, width: TILE.width, height: TILE.height, rx: 4, class: 'outline' }),
          svg('text', { x: 8, y: 18, class: 'tile-name', text: `${name}${t.controlPlane ? ' ◆' : ''}` }),
          svg('text', { x: 8, y: 36, class: 'tile-word', text: `${symbol} ${word}` }),
        );
      }),
    );
  });
  return svg(
    'svg',
    {
      class: 'node-map',
      role: 'group',
      'aria-label': `Node map of ${rollout.name}`,
      'data-map': rollout.name,
      viewBox: `0 0 ${String(MAP_WIDTH)} ${String(Math.max(y, 1))}`,
      width: MAP_WIDTH,
      height: Math.max(y, 1),
    },
    groups,
  );
}

/** Tick steps for the time axis, in seconds. */
const TICK_STEPS = [1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

/**
 * The swimlanes: one lane per node along the rollout's time, its action's phases as
 * segments, failures and holds marked, the governing windows shaded.
 * @param {RolloutView} rollout
 * @param {string} nowIso
 */
function swimlanes(rollout, nowIso) {
  const width = MAP_WIDTH;
  const left = 180;
  const right = 24;
  const axis = 30;
  const laneHeight = 32;
  const start = Date.parse(rollout.range.start);
  const now = Date.parse(nowIso);
  const end = Math.max(Date.parse(rollout.range.end ?? nowIso), start + 15_000);
  /** @param {number} t */
  const x = (t) =>
    left + ((Math.min(Math.max(t, start), end) - start) / (end - start)) * (width - left - right);
  const height = axis + rollout.lanes.length * laneHeight + 4;
  const parts = [];

  const step = TICK_STEPS.find((s) => (end - start) / 1000 / s <= 8) ?? 86400;
  for (let t = Math.ceil(start / 1000 / step) * step * 1000; t <= end; t += step * 1000) {
    parts.push(
      svg('line', { x1: x(t), x2: x(t), y1: axis - 6, y2: height, class: 'tick' }),
      svg('text', {
        x: x(t),
        y: axis - 10,
        class: 'tick-label',
        text: formatTime(new Date(t).toISOString()),
      }),
    );
  }

  rollout.lanes.forEach((lane, i) => {
    const top = axis + i * laneHeight;
    parts.push(svg('rect', { x: 0, y: top, width, height: laneHeight, class: i % 2 ? 'lane odd' : 'lane' }));
    for (const band of rollout.windows) {
      if (!band.nodes.includes(lane.node)) continue;
      for (const open of band.open) {
        const x0 = x(Date.parse(open.start));
        const x1 = x(Date.parse(open.end));
        if (x1 <= x0) continue;
        parts.push(
          svg(
            'rect',
            {
              x: x0,
              y: top,
              width: x1 - x0,
              height: laneHeight,
              class: 'window-band',
              fill: 'url(#pat-window)',
            },
            title(`window of ActionPolicy ${band.policy} open ${open.start} to ${open.end}`),
          ),
          // An edge is drawn where the window opens or closes, not where the drawing cuts it.
          Date.parse(open.start) > start &&
            svg('line', { x1: x0, x2: x0, y1: top, y2: top + laneHeight, class: 'window-edge' }),
          Date.parse(open.end) < end &&
            svg('line', { x1: x1, x2: x1, y1: top, y2: top + laneHeight, class: 'window-edge' }),
        );
      }
    }
    const segments = lane.segments.map((seg) => {
      const x0 = x(Date.parse(seg.start));
      const x1 = Math.max(x0 + 2, x(seg.end ? Date.parse(seg.end) : now));
      const [pattern, short] = PHASE_STYLE[seg.phase] ?? ['pat-none', ''];
      const label = `${lane.node}: ${seg.label} from ${formatTime(seg.start)} ${
        seg.end ? `to ${formatTime(seg.end)}` : 'until now'
      }`;
      const text =
        textWidth(seg.label, 11) + 6 <= x1 - x0
          ? seg.label
          : textWidth(short, 11) + 4 <= x1 - x0
            ? short
            : '';
      const box = { x: x0, y: top + 4, width: x1 - x0, height: laneHeight - 13 };
      return svg(
        'g',
        { class: 'segment', 'data-phase': seg.phase, role: 'listitem', 'aria-label': label },
        title(label),
        filled(box, pattern),
        svg('rect', { ...box, class: 'outline' }),
        text && svg('text', { x: x0 + 3, y: top + 18, class: 'segment-label', text }),
      );
    });
    const marks = lane.marks.map((mark) => {
      const x0 = x(mark.time ? Date.parse(mark.time) : now);
      if (mark.kind === 'failed' || mark.kind === 'unplanned') {
        return svg(
          'g',
          {
            class: 'mark',
            'data-kind': mark.kind,
            role: 'listitem',
            'aria-label': `${lane.node}: ${mark.text}`,
          },
          title(mark.text),
          svg('line', { x1: x0, x2: x0, y1: top + 2, y2: top + laneHeight - 2, class: 'mark-line' }),
          svg('text', {
            x: x0 + 90 < width ? x0 + 4 : x0 - 84,
            y: top + 18,
            class: 'mark-text',
            text: mark.kind === 'failed' ? '✗ failed' : '⚠ unplanned',
          }),
        );
      }
      const x1 = x(mark.end ? Date.parse(mark.end) : now);
      return svg(
        'g',
        {
          class: 'mark',
          'data-kind': 'hold',
          role: 'listitem',
          'aria-label': `${lane.node}: held: ${mark.text}`,
        },
        title(`held: ${mark.text}`),
        x1 > x0 &&
          svg('rect', {
            x: x0,
            y: top + laneHeight - 7,
            width: x1 - x0,
            height: 5,
            class: 'hold-bar',
            fill: 'url(#pat-back-stripes)',
          }),
        // A hold along a segment is the bar under it; one with no segment (held back now) says so.
        !mark.time &&
          svg('text', {
            x: x0 + 80 < width ? x0 + 2 : x0 - 72,
            y: top + 18,
            class: 'mark-text',
            text: '‖ held back',
          }),
      );
    });
    const state = rollout.groups.flatMap((g) => g.tiles).find((t) => t.node === lane.node);
    // Not started yet: where the plan expects it, dashed.
    const planned = lane.planned
      ? [
          (() => {
            const p0 = x(Date.parse(lane.planned.start));
            const p1 = Math.max(p0 + 2, x(Date.parse(lane.planned.end)));
            const label = `${lane.node}: planned from ${formatTime(lane.planned.start)} to ${formatTime(lane.planned.end)}${lane.planned.drain ? `; ${lane.planned.drain}` : ''}`;
            return svg(
              'g',
              { class: 'planned', role: 'listitem', 'aria-label': label },
              title(label),
              svg('rect', {
                x: p0,
                y: top + 6,
                width: p1 - p0,
                height: laneHeight - 17,
                class: lane.planned.drain ? 'planned-bar drain-trouble' : 'planned-bar',
              }),
            );
          })(),
        ]
      : [];
    parts.push(
      svg('text', { x: 8, y: top + 20, class: 'lane-label', text: lane.node }),
      // A lane with nothing drawn says why: not yet, already at target, gone.
      segments.length + marks.length + planned.length === 0 &&
        state &&
        svg('text', { x: left + 4, y: top + 20, class: 'lane-note', text: state.word }),
      svg(
        'g',
        {
          role: 'list',
          'aria-label': `Swimlane of ${lane.node}${state ? `: ${state.word}` : ''}${
            segments.length + marks.length + planned.length === 0 ? ', nothing yet' : ''
          }`,
        },
        planned,
        segments,
        marks,
      ),
    );
  });
  if (rollout.range.end === null) {
    parts.push(
      svg('line', { x1: x(now), x2: x(now), y1: axis - 6, y2: height, class: 'now-line' }),
      svg('text', { x: x(now) - 4, y: 12, class: 'now-label', text: 'now' }),
    );
  }
  return svg(
    'svg',
    {
      class: 'swimlanes',
      role: 'group',
      'aria-label': `Swimlanes of ${rollout.name}`,
      viewBox: `0 0 ${String(width)} ${String(height)}`,
      width,
      height,
    },
    parts,
  );
}

/**
 * What each fill means: the phases, the marks and the windows.
 * @param {RolloutView} rollout
 */
function legend(rollout) {
  /** @param {string} cls @param {string} pattern @param {Record<string, string>} data */
  const swatch = (cls, pattern, data) =>
    svg(
      'svg',
      { class: `swatch ${cls}`, width: 28, height: 14, viewBox: '0 0 28 14', 'aria-hidden': 'true', ...data },
      filled({ x: 0, y: 0, width: 28, height: 14 }, pattern),
      svg('rect', { x: 0, y: 0, width: 28, height: 14, class: 'outline' }),
    );
  const closed = rollout.windows.filter((w) => w.open.length === 0).map((w) => w.policy);
  return h(
    'ul',
    { class: 'legend', 'aria-label': `Legend of ${rollout.name}` },
    LEGEND_PHASES.map(([phase, word]) =>
      h(
        'li',
        {},
        swatch('segment', PHASE_STYLE[phase]?.[0] ?? 'pat-none', { 'data-phase': phase }),
        ` ${word}`,
      ),
    ),
    h('li', {}, h('span', { class: 'legend-symbol', 'data-kind': 'failed', text: '✗' }), ' failed'),
    h(
      'li',
      {},
      swatch('hold-swatch', 'pat-back-stripes', {}),
      ' held (drain refused), ',
      h('span', { class: 'legend-symbol', 'data-kind': 'hold', text: '‖' }),
      ' held back',
    ),
    rollout.windows.length > 0 &&
      h(
        'li',
        {},
        swatch('window-swatch', 'pat-window', {}),
        ` maintenance window open (${rollout.windows.map((w) => `ActionPolicy ${w.policy}`).join(', ')})`,
      ),
    closed.length > 0 &&
      h('li', { class: 'muted', text: `no window open in this time: ${closed.join(', ')}` }),
  );
}

/**
 * The nodes set aside undrained, each with what blocked it: a person's list.
 * @param {RolloutView} rollout
 */
function quarantineList(rollout) {
  if (rollout.quarantined.length === 0) return '';
  return h(
    'section',
    { class: 'quarantine', 'aria-label': `Nodes ${rollout.name} set aside` },
    h('h4', { text: 'Set aside: could not be drained (cordoned, labelled talos.dev/quarantined)' }),
    h(
      'ul',
      {},
      rollout.quarantined.map((q) =>
        h(
          'li',
          {},
          h('strong', { text: q.node }),
          ` ${q.retried ? 'tried again, still blocked: needs a person' : 'to be tried again at the end'}; since ${q.since}: ${q.blockedBy}`,
        ),
      ),
    ),
  );
}

/** @type {Record<RolloutView['state'], string>} */
const ROLLOUT_SYMBOLS = { Complete: '✓', Halted: '✗', Paused: '‖', Progressing: '▶', Planned: '┄', New: '○' };

/**
 * @param {RolloutView} rollout
 * @param {string} now
 */
function rolloutArticle(rollout, now) {
  const c = rollout.counts;
  const counts = c
    ? `${String(c.succeeded)} done, ${String(c.running)} running, ${String(c.failed)} failed, ${String(c.pending)} not yet${
        c.skipped ? `, ${String(c.skipped)} already at target` : ''
      }${c.vanished ? `, ${String(c.vanished)} gone` : ''}${c.quarantined ? `, ${String(c.quarantined)} set aside` : ''}`
    : 'not processed yet';
  const stateBadge = {
    Complete: 'Succeeded',
    Halted: 'Failed',
    Paused: 'Held',
    Progressing: 'Running',
    Planned: 'Pending',
    New: 'Unknown',
  }[rollout.state];
  return h(
    'article',
    { class: 'rollout', 'aria-labelledby': `rollout-${rollout.name}` },
    h(
      'h3',
      { id: `rollout-${rollout.name}` },
      rollout.name,
      ' ',
      badge('phase', stateBadge, ROLLOUT_SYMBOLS[rollout.state] ?? '•', rollout.state),
    ),
    h('p', {
      class: 'muted',
      text: [rollout.action, rollout.target, rollout.groupBy ? `grouped by ${rollout.groupBy}` : null, counts]
        .filter(Boolean)
        .join(' · '),
    }),
    rollout.message ? h('p', { class: 'message', text: rollout.message }) : '',
    h('h4', { text: 'Nodes' }),
    h('div', { class: 'drawing' }, nodeMap(rollout)),
    quarantineList(rollout),
    h('h4', { text: 'Along time' }),
    h(
      'div',
      { class: 'drawing', role: 'region', 'aria-label': `Time of ${rollout.name}`, tabindex: '0' },
      swimlanes(rollout, now),
    ),
    legend(rollout),
  );
}

byId('rollouts-list').addEventListener('keydown', (event) => {
  if (!(event instanceof KeyboardEvent)) return;
  const tile = event.target instanceof SVGElement ? event.target.closest('[data-tile]') : null;
  const map = tile?.closest('[data-map]');
  if (!(tile instanceof SVGElement) || !(map instanceof SVGElement)) return;
  const tiles = [...map.querySelectorAll('[data-tile]')].filter((t) => t instanceof SVGElement);
  const at = tiles.indexOf(tile);
  const to = {
    ArrowRight: at + 1,
    ArrowDown: at + 1,
    ArrowLeft: at - 1,
    ArrowUp: at - 1,
    Home: 0,
    End: tiles.length - 1,
  }[event.key];
  if (to === undefined) return;
  event.preventDefault();
  const next = tiles[Math.min(Math.max(to, 0), tiles.length - 1)];
  if (!next || next === tile) return;
  tile.setAttribute('tabindex', '-1');
  next.setAttribute('tabindex', '0');
  next.focus();
  const name = map.dataset.map;
  const node = next.dataset.tile;
  if (name !== undefined && node !== undefined) mapFocus.set(name, node);
});

// ---------------------------------------------------------------------------------
// Patching: replace only the rows whose data changed, keep their order, keep focus.

/**
 * `noticeOf` says what about an item is worth drawing the eye to (a check's state, not
 * its probe time): only a change of that highlights the row.
 * @template T
 * @param {string} section
 * @param {HTMLElement} container
 * @param {T[]} items
 * @param {(item: T) => string} keyOf
 * @param {(item: T) => HTMLElement} render
 * @param {(item: T) => string} noticeOf
 */
function patch(section, container, items, keyOf, render, noticeOf) {
  let rows = rendered.get(section);
  if (!rows) {
    rows = new Map();
    rendered.set(section, rows);
  }
  const wanted = new Set();
  const first =
    [...container.children].find((el) => el instanceof HTMLElement && el.dataset.key !== undefined) ?? null;
  let cursor = first;
  for (const item of items) {
    const key = keyOf(item);
    wanted.add(key);
    const data = JSON.stringify(item);
    let row = rows.get(key);
    const notice = noticeOf(item);
    if (!row || row.data !== data) {
      const element = render(item);
      element.dataset.key = key;
      if (row) {
        row.element.replaceWith(element);
        if (row.notice !== notice) element.classList.add('changed');
        if (cursor === row.element) cursor = element;
      }
      row = { element, data, notice };
      rows.set(key, row);
    }
    // Moving an element that holds the focus would drop it: move only what is out of place.
    if (row.element !== cursor) container.insertBefore(row.element, cursor);
    else cursor = cursor.nextElementSibling;
  }
  for (const [key, row] of rows) {
    if (!wanted.has(key)) {
      row.element.remove();
      rows.delete(key);
    }
  }
}

/** @param {DashboardView} view */
function render(view) {
  const focusKey = focusKeyOf(document.activeElement);
  const s = view.summary;
  const summary = [
    `${String(s.checks.total)} check${s.checks.total === 1 ? '' : 's'}: ${String(s.checks.healthy)} healthy, ${String(s.checks.unhealthy)} unhealthy, ${String(s.checks.unknown)} unknown`,
    `${String(s.actionsInProgress)} action${s.actionsInProgress === 1 ? '' : 's'} in progress, ${String(s.actionsFinished)} finished`,
  ];
  byId('summary').textContent = `${summary.join('. ')}.`;
  const instance = byId('instance');
  instance.hidden = !view.instance;
  instance.textContent = view.instance ? `controller instance ${view.instance}` : '';

  section(
    'checks',
    view.checks,
    (c) => c.name,
    checkRow,
    (c) => c.state,
  );
  const policies = view.policies ?? [];
  section(
    'policies',
    policies,
    (p) => p.name,
    policyRow,
    (p) => `${p.inUse} ${p.window.open}`,
  );
  byId('policies-empty').textContent =
    view.policies === null
      ? 'This controller does not watch ActionPolicies (it runs without the gate).'
      : 'No ActionPolicies: one action at a time cluster-wide, never two control-plane nodes at once.';
  const rollouts = view.rollouts ?? [];
  // Unfinished rollouts are drawn up to now: the time of the snapshot.
  patch(
    'rollouts',
    byId('rollouts-list'),
    rollouts.map((r) => ({ rollout: r, now: r.range.end === null ? view.generatedAt : null })),
    (item) => item.rollout.name,
    (item) => rolloutArticle(item.rollout, item.now ?? item.rollout.range.end ?? view.generatedAt),
    (item) => `${item.rollout.state} ${JSON.stringify(item.rollout.counts)}`,
  );
  byId('rollouts-empty').hidden = rollouts.length > 0;
  byId('rollouts-empty').textContent =
    view.rollouts === null
      ? 'This controller runs no rollouts (it runs without the gate).'
      : view.actionsHidden
        ? 'Rollouts are action data: shown only to readers allowed to list NodeActions, like the actions below.'
        : 'No NodeRollouts.';
  section(
    'actions',
    view.actions,
    (a) => a.name,
    actionBody,
    (a) => a.phase,
  );
  for (const name of expanded) if (!view.actions.some((a) => a.name === name)) expanded.delete(name);
  const omitted = byId('actions-omitted');
  omitted.hidden = view.actionsOmitted === 0 && !view.actionsHidden;
  omitted.textContent = view.actionsHidden
    ? 'Actions are shown only to readers allowed to list NodeActions (a bearer token, as for GET /v1/actions), unless the operator lets anonymous readers see them (chart value dashboard.anonymousActions).'
    : `${String(view.actionsOmitted)} older finished actions are not shown (kubectl get nodeactions lists them).`;
  section(
    'nodes',
    view.nodes,
    (n) => n.name,
    nodeRow,
    (n) => `${n.ready} ${n.preready}`,
  );

  if (focusKey && focusKeyOf(document.activeElement) !== focusKey) {
    const target = document.querySelector(`[data-focus-key="${CSS.escape(focusKey)}"]`);
    if (target instanceof HTMLElement || target instanceof SVGElement) target.focus({ preventScroll: true });
  }
}

/** @param {Element | null} element */
function focusKeyOf(element) {
  return element instanceof HTMLElement || element instanceof SVGElement
    ? element.dataset.focusKey
    : undefined;
}

/**
 * @template T
 * @param {string} name
 * @param {T[]} items
 * @param {(item: T) => string} keyOf
 * @param {(item: T) => HTMLElement} renderRow
 * @param {(item: T) => string} noticeOf
 */
function section(name, items, keyOf, renderRow, noticeOf) {
  const container = name === 'actions' ? byId('actions-table') : byId(`${name}-body`);
  patch(name, container, items, keyOf, renderRow, noticeOf);
  byId(`${name}-empty`).hidden = items.length > 0;
  // The scrolling wrapper is a keyboard stop: hide it with its table, not only the table.
  const wrapper = byId(`${name}-table`).parentElement;
  if (wrapper) wrapper.hidden = items.length === 0;
}

// ---------------------------------------------------------------------------------
// What changed, in words, for the polite live region.

/**
 * @template {{ name: string }} T
 * @param {T[]} list
 * @returns {Map<string, T>}
 */
function byName(list) {
  return new Map(list.map((x) => [x.name, x]));
}

/**
 * @param {DashboardView | undefined} before
 * @param {DashboardView} after
 */
function changes(before, after) {
  if (!before) return [];
  const out = [];
  const checks = byName(before.checks);
  for (const c of after.checks) {
    const was = checks.get(c.name);
    if (!was) out.push(`Check ${c.name} added: ${c.state}.`);
    else if (was.state !== c.state) out.push(`Check ${c.name} is now ${c.state}: ${c.message}`);
  }
  for (const name of checks.keys()) {
    if (!after.checks.some((c) => c.name === name)) out.push(`Check ${name} removed.`);
  }
  const actions = byName(before.actions);
  for (const a of after.actions) {
    const was = actions.get(a.name);
    if (!was)
      out.push(`Action ${a.name}: ${a.action} of ${a.node}, requested by ${a.requestedBy}, is ${a.phase}.`);
    else if (was.phase !== a.phase)
      out.push(`Action ${a.name} (${a.action} of ${a.node}) is now ${a.phase}.`);
  }
  const policies = byName(before.policies ?? []);
  for (const p of after.policies ?? []) {
    const was = policies.get(p.name);
    if (was && was.window.open !== p.window.open)
      out.push(`Policy ${p.name}: maintenance window ${p.window.open ? 'opened' : 'closed'}.`);
  }
  return out;
}

/** @param {string[]} messages */
function announce(messages) {
  const log = byId('changes-log');
  const now = new Date().toISOString();
  for (const message of messages) log.prepend(h('li', {}, time(now), ` ${message}`));
  while (log.children.length > CHANGES_KEPT) log.lastElementChild?.remove();
}

// ---------------------------------------------------------------------------------
// The connection.

/**
 * @param {'live' | 'reconnecting' | 'offline'} state
 * @param {string} text
 */
function connection(state, text) {
  const element = byId('connection');
  const words = byId('connection-text');
  // Rewriting the same words would have some screen readers announce them again.
  if (element.dataset.state === state && words.textContent === text) return;
  element.dataset.state = state;
  const symbol = element.querySelector('.connection-symbol');
  if (symbol) symbol.textContent = state === 'live' ? '●' : '○';
  words.textContent = text;
}

function connect() {
  const source = new EventSource(new URL('v1/dashboard/events', document.baseURI));
  source.addEventListener('open', () => connection('live', 'live'));
  source.addEventListener('snapshot', (event) => {
    /** @type {DashboardView} */
    const view = JSON.parse(event.data);
    connection('live', 'live');
    announce(changes(previous, view));
    render(view);
    previous = view;
    const updated = byId('updated');
    updated.replaceChildren('updated ', time(new Date().toISOString()));
  });
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) {
      // The browser gives up on an HTTP error (a 503 at the stream limit): try again later.
      connection('offline', `disconnected — retrying in ${String(RECONNECT_MS / 1000)} s`);
      window.setTimeout(connect, RECONNECT_MS);
    } else {
      connection('reconnecting', 'reconnecting…');
    }
  });
}

byId('actions-table').addEventListener('click', (event) => {
  const button = event.target instanceof Element ? event.target.closest('button[data-toggle]') : null;
  const name = button instanceof HTMLElement ? button.dataset.toggle : undefined;
  if (!button || name === undefined) return;
  const open = button.getAttribute('aria-expanded') !== 'true';
  if (open) expanded.add(name);
  else expanded.delete(name);
  button.setAttribute('aria-expanded', String(open));
  const symbol = button.querySelector('.disclosure-symbol');
  if (symbol) symbol.textContent = open ? '▾' : '▸';
  const details = document.getElementById(button.getAttribute('aria-controls') ?? '');
  if (details) details.hidden = !open;
});

connect();
