import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.rest.RESTCatalog;

/**
 * Every row of an Iceberg table's current snapshot, read through a REST catalog by Apache
 * Iceberg's own Java library (its generic reader of the data files): a second reader beside
 * PyIceberg, with its own planning of manifests and deletes. Prints one JSON object per row
 * with the columns asked for; binary values as UTF-8 text.
 */
public final class IcebergRows {
  private IcebergRows() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      System.err.println("usage: IcebergRows <rest catalog uri> <namespace.table> <column>...");
      System.exit(2);
    }
    List<String> columns = Arrays.asList(args).subList(2, args.length);
    ObjectMapper json = new ObjectMapper();
    try (RESTCatalog catalog = new RESTCatalog()) {
      catalog.setConf(new Configuration());
      catalog.initialize(
          "reader", Map.of("uri", args[0], "io-impl", "org.apache.iceberg.hadoop.HadoopFileIO"));
      Table table = catalog.loadTable(TableIdentifier.parse(args[1]));
      String[] selected = columns.toArray(new String[0]);
      try (CloseableIterable<Record> rows = IcebergGenerics.read(table).select(selected).build()) {
        for (Record row : rows) {
          Map<String, Object> out = new LinkedHashMap<>();
          for (String column : columns) {
            Object value = row.getField(column);
            if (value instanceof ByteBuffer bytes) {
              value = StandardCharsets.UTF_8.decode(bytes.duplicate()).toString();
            }
            out.put(column, value);
          }
          System.out.println(json.writeValueAsString(out));
        }
      }
    }
  }
}
