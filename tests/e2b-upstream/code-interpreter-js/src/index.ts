export * from 'e2b'

export { Sandbox } from './sandbox'
export type {
  Context,
  RunCodeLanguage,
  RunCodeOpts,
  CreateCodeContextOpts,
} from './sandbox'
export type {
  Logs,
  ExecutionError,
  Result,
  Execution,
  MIMEType,
  RawData,
  OutputMessage,
} from './messaging'
export type {
  ScaleType,
  ChartType,
  ChartTypes,
  Chart,
  BarChart,
  BarData,
  LineChart,
  ScatterChart,
  BoxAndWhiskerChart,
  BoxAndWhiskerData,
  PieChart,
  PieData,
  SuperChart,
  PointData,
} from './charts'
import { Sandbox } from './sandbox'

export default Sandbox
