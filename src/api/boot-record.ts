// What gatehouse keeps on a Node about its boots, in two annotations holding JSON.
//
// talos.dev/boot-hooks — the boot record, written by the boot reconciler (src/boots):
// the node's boot hooks for ONE boot, the current one. A record for another boot ID
// never counts. Each stage lists the UIDs of the hooks its outcome covers, so that a
// hook created (or deleted and created again) after the stage finished is run for the
// current boot instead of being taken as done.
//
//   {"bootID": "…", "action": {…}?,
//    "preready": {"phase": "Succeeded", "hooks": ["<uid>", …], "runs": [<HookRunRecord>, …], …},
//    "ready":    {"phase": "Running",   "hooks": […],             "runs": […], …}}
//
// talos.dev/next-boot — the announcement, written by the action reconciler when it is
// about to approve a disruptive action on a node that boot hooks select (together with
// the preready taint when a NodePrereadyJob selects it): "the next boot of this node
// after boot ID … is this action's". The boot reconciler keeps the taint on while it
// stands, and removes it once the node has booted again (the record of that boot then
// names the action) or the action ended without the node booting.
//
// Anyone allowed to patch Nodes can write these; a value that does not match its schema
// is treated as absent, which keeps the taint on (see src/boots/record.ts).
import Type, { type Static } from 'typebox';
import { ACTIONS, DnsSubdomain, StringEnum, Text, Timestamp } from './common.ts';
import { HookRunRecord } from './node-action.ts';

export const BootAction = Type.Object(
  {
    name: DnsSubdomain('Name of the NodeAction.'),
    uid: Type.String({ description: 'UID of the NodeAction.', maxLength: 64 }),
    action: StringEnum(ACTIONS, { description: 'What the action does to the node.' }),
    parameters: Type.Record(Type.String(), Type.Unknown(), {
      description: "The action's parameters (upgrade, reboot, reset, configChange), as its spec has them.",
    }),
    targetImage: Type.Optional(
      Type.String({ description: 'The image of an Upgrade (GATEHOUSE_TARGET_IMAGE).', maxLength: 1024 }),
    ),
  },
  {
    description:
      'The NodeAction that caused a boot: its boot hooks run with GATEHOUSE_ACTION and GATEHOUSE_ACTION_NAME set.',
  },
);

export const BootStage = Type.Object(
  {
    phase: StringEnum(['Pending', 'Running', 'Succeeded', 'Failed'], {
      description:
        'Pending (not started), Running, Succeeded (every hook it covers succeeded or failed under Ignore), or Failed.',
    }),
    hooks: Type.Array(Type.String({ maxLength: 64 }), {
      description:
        'UIDs of the hooks the phase covers. A completion counts only for these: a hook not among them runs for this boot.',
      maxItems: 512,
    }),
    runs: Type.Array(HookRunRecord, {
      description: 'Every attempt of every hook of the stage for this boot, persisted before its Job exists.',
      maxItems: 512,
    }),
    message: Type.Optional(Text('What the stage is doing, or how it ended.', 4096)),
    time: Type.Optional(Timestamp('When the stage entered its phase.')),
  },
  { description: 'One stage of the boot hooks: the NodePrereadyJobs, or the NodeReadyJobs.' },
);

export const BootRecord = Type.Object(
  {
    bootID: Type.String({
      description: 'The boot the record is about (status.nodeInfo.bootID).',
      maxLength: 64,
    }),
    action: Type.Optional(BootAction),
    preready: BootStage,
    ready: BootStage,
  },
  { description: 'The boot hooks of one boot of a node (annotation talos.dev/boot-hooks).' },
);

export const BootAnnouncement = Type.Object(
  {
    action: BootAction,
    bootID: Type.String({
      description:
        "The boot ID of the node when the action was about to be approved: the next boot is the action's.",
      maxLength: 64,
    }),
    time: Timestamp('When the announcement was made.'),
  },
  {
    description: 'An approved disruptive action expects this node to boot (annotation talos.dev/next-boot).',
  },
);

export type BootAction = Static<typeof BootAction>;
export type BootStage = Static<typeof BootStage>;
export type BootRecord = Static<typeof BootRecord>;
export type BootAnnouncement = Static<typeof BootAnnouncement>;
