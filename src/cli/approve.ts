// `gatehouse approve NAME... --reason R [--refuse]`: a person's answer to the approval
// hook each action waits for, in their own name, recorded with their reason. Approving
// lets the action go on; refusing ends it Denied.
import { Command } from 'commander';
import { hasVisibleWords } from '../api/node-action.ts';
import { clusterCommand, connect, type ConnectionOptions } from './connection.ts';
import { CliError, EXIT, handled } from './exit.ts';

export function approveCommand(): Command {
  return clusterCommand('approve')
    .description(
      'approve (or --refuse) NodeActions waiting at an approval hook, in your name and with your reason; needs the verb approve on nodeactions (ClusterRole gatehouse:approve)',
    )
    .argument('<actions...>', 'the NodeActions waiting for approval (gatehouse actions list shows them)')
    .requiredOption(
      '--reason <reason>',
      'why, in your words: recorded with your name (e.g. "CHG-1234 approved")',
    )
    .option('--refuse', 'refuse instead: each action ends Denied with your reason')
    .action(
      handled(async (names: string[], _: unknown, cmd: Command) => {
        const flags = cmd.optsWithGlobals<ConnectionOptions & { reason: string; refuse?: boolean }>();
        const reason = flags.reason.trim();
        if (!hasVisibleWords(reason))
          throw new CliError('--reason must say why, in words: it is recorded with your name', EXIT.usage);
        const backend = await connect(flags);
        const decision = flags.refuse ? 'Refuse' : 'Approve';
        for (const name of names) {
          const action = await backend.approve(name, decision, reason);
          const hook = action.status?.approval?.pending?.hook ?? 'its approval hook';
          process.stdout.write(`${name}: ${decision === 'Approve' ? 'approved' : 'refused'} (${hook})\n`);
        }
      }),
    );
}
