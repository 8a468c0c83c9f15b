// abx completion bash: a bash completion script (`source <(abx completion bash)`).
#include <iostream>

#include "cli.h"

namespace abx::cli {

namespace {

constexpr const char* kBash = R"BASH(# bash completion for abx
_abx() {
  local cur prev words cword
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  local top="sandbox exec code files logs template snapshot commands run token up mcp completion help"
  local globals="--json --api-url --api-key --domain --sandbox-url --server-url --access-token --home --template --help"
  if [[ ${COMP_CWORD} -eq 1 ]]; then
    COMPREPLY=( $(compgen -W "${top} ${globals}" -- "${cur}") )
    return
  fi
  case "${prev}" in
    --module|--home) COMPREPLY=( $(compgen -f -- "${cur}") ); return ;;
  esac
  case "${COMP_WORDS[1]}" in
    sandbox|sbx)
      if [[ ${COMP_CWORD} -eq 2 ]]; then
        COMPREPLY=( $(compgen -W "create list info kill timeout connect pause resume fork snapshot network" -- "${cur}") ); return
      fi ;;
    files)
      if [[ ${COMP_CWORD} -eq 2 ]]; then
        COMPREPLY=( $(compgen -W "cp read write ls rm mkdir" -- "${cur}") ); return
      fi ;;
    template|templates)
      if [[ ${COMP_CWORD} -eq 2 ]]; then
        COMPREPLY=( $(compgen -W "list info" -- "${cur}") ); return
      fi ;;
    snapshot|snapshots)
      if [[ ${COMP_CWORD} -eq 2 ]]; then
        COMPREPLY=( $(compgen -W "list rm" -- "${cur}") ); return
      fi ;;
    commands)
      if [[ ${COMP_CWORD} -eq 2 ]]; then COMPREPLY=( $(compgen -W "list" -- "${cur}") ); return; fi ;;
    token)
      if [[ ${COMP_CWORD} -eq 2 ]]; then COMPREPLY=( $(compgen -W "create" -- "${cur}") ); return; fi ;;
    completion)
      COMPREPLY=( $(compgen -W "bash" -- "${cur}") ); return ;;
  esac
  local sub="--json --help --module -a --arg --ttl --command --timeout --env --metadata --cwd --user --state --limit -n --count --name --sandbox --depth --local -i -t --interactive --tty -f --follow --since --context --language --save-images --contexts --new-context --restart-context --remove-context"
  COMPREPLY=( $(compgen -W "${sub} ${globals}" -- "${cur}") )
}
complete -o default -F _abx abx
)BASH";

void fill_completion(CLI::App* c, Context& ctx) {
  auto shell = std::make_shared<std::string>("bash");
  c->add_option("shell", *shell, "Shell")->check(CLI::IsMember({"bash"}))->capture_default_str();
  c->callback([&ctx, shell] {  // `shell` lives as long as the option that writes it
    std::cout << kBash;
    ctx.exit_code = kExitOk;
  });
}

}  // namespace

const TopCommand kCompletionCommand{"completion", nullptr, "Print a shell completion script (bash)",
                                    fill_completion};

}  // namespace abx::cli
