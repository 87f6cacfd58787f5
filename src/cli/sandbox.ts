// `gatehouse sandbox up|down|env`: a local control plane for trying gatehouse out.
import { join } from 'node:path';
import { Command } from 'commander';
import type { SandboxState } from '../../sandbox/cluster.ts';
import { cacheDir } from '../cache-dir.ts';
import { duration, wholeNumber } from './arguments.ts';
import { handled } from './exit.ts';
import { loadTestBed } from './test-bed.ts';

const cluster = () => loadTestBed('sandbox', () => import('../../sandbox/cluster.ts'));

export function defaultSandboxDir(): string {
  return process.env.GATEHOUSE_SANDBOX_DIR ?? join(cacheDir(), 'sandboxes', 'default');
}

const nodeCount = wholeNumber(0);

function envLines(state: SandboxState): string {
  return [
    `export KUBECONFIG=${state.kubeconfig}\n`,
    state.talosconfig ? `export TALOSCONFIG=${state.talosconfig}\n` : '',
    state.monitoring
      ? `export GATEHOUSE_PROMETHEUS_URL=${state.monitoring.prometheus}\nexport GATEHOUSE_ALERTMANAGER_URL=${state.monitoring.alertmanager}\n`
      : '',
  ].join('');
}

export function sandboxCommand(): Command {
  const sandbox = new Command('sandbox').description(
    'a local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler) with kwok-simulated Talos nodes',
  );
  const dirOption = ['--dir <path>', 'where the sandbox keeps its files', defaultSandboxDir()] as const;

  sandbox
    .command('up')
    .description('build (first time only) and start the sandbox; it runs until `gatehouse sandbox down`')
    .option(...dirOption)
    .option('--nodes <n>', 'simulated nodes in all', nodeCount, 4)
    .option('--control-planes <n>', 'how many of them are control-plane nodes', nodeCount, 1)
    .option(
      '--talos-versions <list>',
      'Talos versions the nodes run in turn, comma-separated (e.g. 1.12.6,1.13.9,1.14.0)',
    )
    .option('--no-talos', 'do not start the Talos API simulator')
    .option(
      '--with-monitoring',
      'also start Prometheus (scraping a controller on 127.0.0.1:8080) and Alertmanager on loopback',
    )
    .option(
      '--talos-boot-delay <duration>',
      'how long a node the Talos simulator reboots stays down',
      duration,
      '2s',
    )
    .action(
      handled(
        async (opts: {
          dir: string;
          nodes: number;
          controlPlanes: number;
          talosVersions?: string;
          talos: boolean;
          talosBootDelay: string;
          withMonitoring?: boolean;
        }) => {
          const { attachSandbox, startSandbox } = await cluster();
          const running = await attachSandbox(opts.dir);
          if (running) {
            process.stderr.write(`sandbox already up at ${running.state.server}\n`);
            process.stdout.write(envLines(running.state));
            return;
          }
          const { defaultNodeSpecs } = await loadTestBed('sandbox', () => import('../../sandbox/nodes.ts'));
          const sb = await startSandbox({
            dir: opts.dir,
            nodes: defaultNodeSpecs(
              opts.nodes,
              Math.min(opts.controlPlanes, opts.nodes),
              opts.talosVersions?.split(',').filter((v) => v.trim() !== '') ?? [],
            ),
            talos: opts.talos,
            talosBootDelay: opts.talosBootDelay,
            monitoring: opts.withMonitoring ?? false,
            log: (line) => process.stderr.write(`${line}\n`),
          });
          process.stderr.write(
            `\nsandbox up: ${sb.state.server} (kubernetes ${sb.state.kubernetesVersion})\n`,
          );
          process.stderr.write(`nodes: ${sb.state.nodes.join(', ')}\nto use it:\n`);
          if (sb.state.talosconfig) process.stderr.write(`Talos API simulator: ${sb.state.talosconfig}\n`);
          if (sb.state.monitoring)
            process.stderr.write(
              `Prometheus: ${sb.state.monitoring.prometheus}\nAlertmanager: ${sb.state.monitoring.alertmanager}\n`,
            );
          process.stdout.write(envLines(sb.state));
        },
      ),
    );

  sandbox
    .command('down')
    .description('stop every process of the sandbox and remove its files')
    .option(...dirOption)
    .action(
      handled(async (opts: { dir: string }) => {
        const { readState, stopSandbox } = await cluster();
        const state = await readState(opts.dir);
        await stopSandbox(opts.dir);
        process.stderr.write(
          state
            ? `sandbox stopped (${String(state.processes.length)} processes)\n`
            : 'no sandbox was running\n',
        );
      }),
    );

  sandbox
    .command('env')
    .description('print shell exports for the running sandbox: eval "$(gatehouse sandbox env)"')
    .option(...dirOption)
    .action(
      handled(async (opts: { dir: string }) => {
        const { attachSandbox } = await cluster();
        const running = await attachSandbox(opts.dir);
        if (!running) {
          process.stderr.write(
            `no sandbox is running in ${opts.dir}; start one with: gatehouse sandbox up\n`,
          );
          process.exitCode = 1;
          return;
        }
        process.stdout.write(envLines(running.state));
      }),
    );
  return sandbox;
}
