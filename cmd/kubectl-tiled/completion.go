package main

import (
	"github.com/spf13/cobra"
)

func newCompletionCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish|powershell",
		Short: "Print a shell completion script",
		Long: `Print a shell completion script for kubectl-tiled.

It completes the command when run as kubectl-tiled. For "kubectl tiled <TAB>" (kubectl 1.26 and
newer), put an executable named kubectl_complete-tiled on the PATH that runs
"kubectl-tiled __complete" with its arguments; kubectl calls it.`,
		Example: `  # bash, for the current shell
  source <(kubectl tiled completion bash)

  # zsh
  kubectl tiled completion zsh > "${fpath[1]}/_kubectl-tiled"

  # fish
  kubectl tiled completion fish > ~/.config/fish/completions/kubectl-tiled.fish

  # kubectl tiled <TAB>
  printf '#!/bin/sh\nexec kubectl-tiled __complete "$@"\n' > ~/bin/kubectl_complete-tiled
  chmod +x ~/bin/kubectl_complete-tiled`,
		ValidArgs: []string{"bash", "zsh", "fish", "powershell"},
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			// The scripts complete the binary's own name.
			use := root.Use
			root.Use = "kubectl-tiled"
			defer func() { root.Use = use }()
			w := o.streams.Out
			switch args[0] {
			case "bash":
				return root.GenBashCompletionV2(w, true)
			case "zsh":
				return root.GenZshCompletion(w)
			case "fish":
				return root.GenFishCompletion(w, true)
			default:
				return root.GenPowerShellCompletionWithDesc(w)
			}
		},
	}
}
