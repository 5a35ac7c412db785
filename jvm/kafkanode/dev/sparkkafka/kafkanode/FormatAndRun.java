package dev.sparkkafka.kafkanode;

import java.io.File;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.Arrays;
import org.apache.kafka.common.utils.Exit;

/**
 * A test broker in one JVM: formats its storage (Kafka's own StorageTool) when it has none
 * yet, then runs the broker, where Kafka's scripts start a JVM for each. A JVM's start is
 * most of a test broker's CPU, and the tests start dozens.
 *
 * <p>Usage: {@code FormatAndRun SERVER_PROPERTIES LOG_DIR [STORAGE_TOOL_ARGS...]}: when
 * LOG_DIR has no meta.properties, {@code kafka.tools.StorageTool} runs with the arguments
 * after it; then {@code kafka.Kafka SERVER_PROPERTIES}. The same on every broker version
 * since 3.5: both go through Kafka's main methods, whose exits Kafka's {@link Exit} hooks.
 */
public final class FormatAndRun {
  private FormatAndRun() {}

  /** The StorageTool's exit, which its main method calls also when it succeeds. */
  private static final class ToolExit extends RuntimeException {
    final int status;

    ToolExit(int status) {
      super(null, null, false, false);
      this.status = status;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 2) {
      System.err.println("usage: FormatAndRun SERVER_PROPERTIES LOG_DIR [STORAGE_TOOL_ARGS...]");
      System.exit(2);
    }
    if (!new File(args[1], "meta.properties").exists()) {
      int status = format(Arrays.copyOfRange(args, 2, args.length));
      if (status != 0) {
        System.err.println("StorageTool format failed with exit status " + status);
        System.exit(status);
      }
    }
    run("kafka.Kafka", new String[] {args[0]});
  }

  private static int format(String[] toolArgs) throws Exception {
    Exit.setExitProcedure((status, message) -> {
      throw new ToolExit(status);
    });
    try {
      run("kafka.tools.StorageTool", toolArgs);
      return 0;
    } catch (ToolExit exit) {
      return exit.status;
    } finally {
      Exit.resetExitProcedure();
    }
  }

  private static void run(String mainClass, String[] args) throws Exception {
    Method main = Class.forName(mainClass).getMethod("main", String[].class);
    try {
      main.invoke(null, (Object) args);
    } catch (InvocationTargetException e) {
      if (e.getCause() instanceof Exception cause) {
        throw cause;
      }
      throw e;
    }
  }
}
