// The java context of sandlot's code interpreter (server.py starts one JVM per context running this):
// cells are evaluated by JShell (the jdk.jshell API, as IJava, E2B's Java kernel, is built on it), in
// this JVM (the "local" execution engine), so snippets' System.out and System.err are this process's
// stdout and stderr and declarations stay between cells.
//
// A cell arrives as one line on stdin: `cell <base64 code>` followed by ` <base64 name>:<base64 value>`
// per env var of the cell. As E2B's Java kernel does, env vars are system properties here
// (System.getProperty): the process's environment at start and each cell's env_vars, which are put
// back after the cell. After the cell, a marker goes to stderr and one to stdout whose payload is the
// outcome (space-separated base64 fields: `ok`, `ok <value>`, or `error <name> <value> <traceback>`).
// SIGINT stops the running snippet (JShell.stop) and never ends the process.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.stream.Collectors;

import jdk.jshell.Diag;
import jdk.jshell.EvalException;
import jdk.jshell.ExpressionSnippet;
import jdk.jshell.JShell;
import jdk.jshell.Snippet;
import jdk.jshell.SnippetEvent;
import jdk.jshell.SourceCodeAnalysis;
import jdk.jshell.VarSnippet;

public class JavaRepl {
    private static final Base64.Encoder B64 = Base64.getEncoder();
    private static final Base64.Decoder UNB64 = Base64.getDecoder();

    public static void main(String[] args) throws Exception {
        String token = System.getenv("SANDLOT_REPL_TOKEN");
        for (Map.Entry<String, String> e : System.getenv().entrySet()) {
            if (!e.getKey().startsWith("SANDLOT_REPL_") && System.getProperty(e.getKey()) == null) {
                System.setProperty(e.getKey(), e.getValue());
            }
        }
        JShell shell = JShell.builder().executionEngine("local").build();
        sun.misc.Signal.handle(new sun.misc.Signal("INT"), signal -> shell.stop());
        // The first evaluation compiles JShell's own wrappers: done now, not in the first cell.
        shell.eval("0");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] fields = line.split(" ");
            if (fields.length < 2 || !fields[0].equals("cell")) {
                continue;
            }
            Map<String, String> env = new LinkedHashMap<>();
            for (int i = 2; i < fields.length; i++) {
                String[] kv = fields[i].split(":", 2);
                env.put(decode(kv[0]), decode(kv[1]));
            }
            String outcome;
            Map<String, String> saved = new LinkedHashMap<>();
            env.forEach((k, v) -> saved.put(k, System.setProperty(k, v)));
            try {
                outcome = run(shell, decode(fields[1]));
            } catch (Throwable t) {
                outcome = error(t.getClass().getSimpleName(), String.valueOf(t.getMessage()), stack(t));
            } finally {
                saved.forEach((k, v) -> {
                    if (v == null) System.clearProperty(k);
                    else System.setProperty(k, v);
                });
            }
            System.out.flush();
            System.err.flush();
            System.err.print("\u001e" + token + "\u001e");
            System.err.flush();
            System.out.print("\u001e" + token + outcome + "\u001e");
            System.out.flush();
        }
    }

    /** Evaluates each complete snippet of `code` in turn; the outcome of the first failure, else the
     *  value of the last expression (if it has one). */
    static String run(JShell shell, String code) {
        SourceCodeAnalysis analysis = shell.sourceCodeAnalysis();
        String remaining = code;
        String value = null;
        while (!remaining.isBlank()) {
            SourceCodeAnalysis.CompletionInfo info = analysis.analyzeCompletion(remaining);
            String source;
            if (info.completeness().isComplete()) {
                source = info.source();
                remaining = info.remaining();
            } else {
                // Incomplete (a missing semicolon or brace): evaluated as is, JShell says what is wrong.
                source = remaining;
                remaining = "";
            }
            value = null;
            for (SnippetEvent event : shell.eval(source)) {
                if (event.causeSnippet() != null) {
                    continue; // another snippet updated because of this one
                }
                if (event.exception() != null) {
                    Throwable t = event.exception();
                    String name = t instanceof EvalException ? ((EvalException) t).getExceptionClassName()
                                                             : t.getClass().getName();
                    return error(name.substring(name.lastIndexOf('.') + 1), String.valueOf(t.getMessage()), stack(t));
                }
                if (event.status() == Snippet.Status.REJECTED) {
                    List<String> messages = shell.diagnostics(event.snippet())
                            .filter(Diag::isError)
                            .map(d -> d.getMessage(Locale.ROOT))
                            .collect(Collectors.toList());
                    return error("CompilationException", String.join("\n", messages), source.strip());
                }
                value = shown(event);
            }
        }
        return value == null ? "ok" : "ok " + encode(value);
    }

    /** The value an expression cell shows (none for declarations and statements); a String as itself,
     *  not as JShell's quoted literal, as IJava shows it. */
    static String shown(SnippetEvent event) {
        Snippet snippet = event.snippet();
        String type;
        if (snippet instanceof ExpressionSnippet) {
            type = ((ExpressionSnippet) snippet).typeName();
        } else if (snippet.subKind() == Snippet.SubKind.TEMP_VAR_EXPRESSION_SUBKIND) {
            type = ((VarSnippet) snippet).typeName();
        } else {
            return null;
        }
        String value = event.value();
        if (value == null) {
            return null;
        }
        if ((type.equals("String") || type.equals("java.lang.String")) && value.startsWith("\"")) {
            return unquote(value);
        }
        return value;
    }

    /** A Java string literal (as JShell prints a String) back to its text. */
    static String unquote(String literal) {
        StringBuilder out = new StringBuilder();
        for (int i = 1; i < literal.length() - 1; i++) {
            char c = literal.charAt(i);
            if (c != '\\' || i + 1 >= literal.length() - 1) {
                out.append(c);
                continue;
            }
            char n = literal.charAt(++i);
            switch (n) {
                case 'n': out.append('\n'); break;
                case 't': out.append('\t'); break;
                case 'r': out.append('\r'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 's': out.append(' '); break;
                case 'u':
                    out.append((char) Integer.parseInt(literal.substring(i + 1, i + 5), 16));
                    i += 4;
                    break;
                default:
                    if (n >= '0' && n <= '7') {
                        int j = i;
                        while (j < literal.length() - 1 && j < i + 3 && literal.charAt(j) >= '0' && literal.charAt(j) <= '7') j++;
                        out.append((char) Integer.parseInt(literal.substring(i, j), 8));
                        i = j - 1;
                    } else {
                        out.append(n); // \" \' \\
                    }
            }
        }
        return out.toString();
    }

    static String error(String name, String value, String traceback) {
        return "error " + encode(name) + " " + encode(value) + " " + encode(traceback);
    }

    static String stack(Throwable t) {
        StringWriter w = new StringWriter();
        t.printStackTrace(new PrintWriter(w));
        return w.toString();
    }

    static String encode(String s) {
        return B64.encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    static String decode(String s) {
        return new String(UNB64.decode(s), StandardCharsets.UTF_8);
    }
}
