// The Flow extension: starts `flow lsp` (stdio) for .flow files through vscode-languageclient.
// Plain JavaScript, so the folder is the extension as it is: `npm install` fetches the client
// library, and nothing is compiled.
"use strict";

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

const CHECKPOINT_COMMAND = "flow.showCheckpoint";
let client;

function serverOptions() {
  const configured = vscode.workspace.getConfiguration("flow").get("server.command") || ["flow", "lsp"];
  const [command, ...args] = configured;
  const folder = vscode.workspace.workspaceFolders && vscode.workspace.workspaceFolders[0];
  const options = folder ? { cwd: folder.uri.fsPath } : {};
  return { command, args, transport: TransportKind.stdio, options };
}

function activate(context) {
  const clientOptions = {
    documentSelector: [{ scheme: "file", language: "flow" }],
    synchronize: { fileEvents: vscode.workspace.createFileSystemWatcher("**/{*.flow,flow.toml}") },
  };
  client = new LanguageClient("flow", "Flow", serverOptions(), clientOptions);
  // A code lens marks a checkpoint place; choosing it says what that means.
  context.subscriptions.push(
    vscode.commands.registerCommand(CHECKPOINT_COMMAND, (caller, callee) => {
      vscode.window.showInformationMessage(
        `A checkpoint can be taken at this tail call from ${caller} to ${callee}: ` +
          "a run can be forked or resumed from here (flow fork RUN --checkpoint N).");
    }));
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
