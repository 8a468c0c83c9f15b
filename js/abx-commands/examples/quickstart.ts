// The README's worked example; `npm run example` compiles it (against the built package and
// the e2b SDK's types) to dist-examples/; test/commands.test.mjs runs it. Against abxd:
//   E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:3000 \
//   E2B_API_KEY=$(cat ~/.abx/api_key) node dist-examples/quickstart.js
import { Sandbox } from 'e2b';
import {
  AbxCommands,
  CommandNotFoundError,
  InvalidArgumentsError,
  commands,
  type CommandInfo,
} from 'abx-commands';

const sbx = await Sandbox.create('demo');
try {
  const cmds = commands(sbx);

  // Discovery: names, descriptions and typed argument schemas.
  const list: CommandInfo[] = await cmds.listCommands();
  for (const c of list) {
    const args = c.args.map((a) => `${a.name}: ${a.type}${a.required ? '' : ` = ${JSON.stringify(a.default)}`}`);
    console.log(`${c.name}(${args.join(', ')}) — ${c.description}`);
  }

  // A call: JSON keyword arguments in, the command's JSON result out.
  const out = await cmds.callCommand<string>('demo', { x: 42, y: 'world' }, { timeoutMs: 10_000 });
  console.log(out); // 42: world

  // Typed errors.
  try {
    await cmds.callCommand('demo', { x: 'not a number' });
  } catch (e) {
    if (e instanceof InvalidArgumentsError) console.log(`bad argument ${e.field}: ${e.message}`);
    else throw e;
  }

  // A scoped token: reaches `demo` only. Hand it (with the sandbox id) to a less trusted process.
  const { token, expiresAt } = await cmds.scopedToken(['demo'], 600);
  const agent = new AbxCommands({ sandboxId: sbx.sandboxId, accessToken: token }); // E2B_SANDBOX_URL
  console.log(await agent.callCommand('demo', { x: 1 }), 'until', expiresAt.toISOString());
  try {
    await agent.callCommand('add', { a: 1, b: 2 });
  } catch (e) {
    if (e instanceof CommandNotFoundError) console.log('add is out of scope');
    else throw e;
  }
} finally {
  await sbx.kill();
}
